"""spur cluster: `status` asks the controllers; deploy/upgrade/health/teardown run the collection's playbooks."""

from __future__ import annotations

PLAYBOOK_COMMANDS = ("deploy", "upgrade", "health", "teardown")


def main(argv: list[str], program: str = "spur cluster") -> int:
    if argv and argv[0] in PLAYBOOK_COMMANDS:
        from spur_hpc.cli import playbooks

        return playbooks.main(argv, program)
    from spur_hpc.cli import clusterstatus
    from spur_hpc.cli.runner import CliError

    if argv and not argv[0].startswith("-") and argv[0] != "status":
        raise CliError(f"unknown cluster command '{argv[0]}': use status, deploy, upgrade, health or teardown")

    return clusterstatus.main(argv, program=program)
