"""The small base every Spur daemon shares: arguments, logging, signals, run loop, shutdown.

spurctld, spurd and spurstepd subclass Daemon and fill in start() / stop(); their console-script
main() is one line. SIGTERM and SIGINT ask for a clean stop once (a second one exits at once),
SIGHUP calls reload(). The exit status says how it ended: one of the EXIT_* codes below.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from spur_hpc import buildinfo, sdnotify
from spur_hpc.conf import ConfigError, startup_warnings

# What a daemon's exit status says (docs/reliability.md "Exit statuses" is this table for operators).
EXIT_OK = 0  # stopped cleanly: SIGTERM or SIGINT handled and everything shut down (or --version)
EXIT_CRASH = 1  # an unexpected error (its traceback is in the log), or a second SIGTERM/SIGINT cut the stop short
# Refused to start, or stopped by a refusal that retrying cannot fix: a bad command line or configuration, a
# state_dir or port it cannot use, a registration the controller refused. One line says what to fix.
EXIT_REFUSED = 2
# A fault while serving that the daemon cannot recover from (spurctld: its Raft core stopped, or it had no leader for
# [controller] leaderless_exit_secs): sysexits.h's EX_SOFTWARE, the upstream controller's choice.
EXIT_FATAL = 70


class StartupError(Exception):
    """A daemon refuses to start: the message says why and what to do (one line)."""


class Daemon:
    program = "spur"
    description = ""
    conf_role: str | None = None  # the role conf.load() checks the file for and startup warnings are about

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.exit_code = EXIT_OK
        self.log = logging.getLogger(self.program)
        self._term_count = 0
        self.notifier = sdnotify.Notifier(None)

    # -- to override ------------------------------------------------------------------------
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--conf", "-f", help="spur.conf path (default: $SPUR_CONF or /etc/spur/spur.conf)")

    def configure(self, args: argparse.Namespace) -> None:
        """Read and validate configuration; raise ConfigError or StartupError."""

    def start(self) -> None:
        """Start serving (may block briefly); raise StartupError to refuse."""

    def stop(self) -> None:
        """Stop serving; called once from the main thread."""

    def reload(self) -> None:
        self.log.info("SIGHUP: nothing to reload")

    def wait(self) -> None:
        """Block until asked to stop (override to watch something else too)."""
        while not self.stopping.wait(0.5):
            self.notifier.watchdog()

    # -- the run loop ------------------------------------------------------------------------
    def request_stop(self, code: int = EXIT_OK) -> None:
        """Stop from any thread; a non-zero code (the first one given) becomes the exit status."""
        if code and not self.exit_code:
            self.exit_code = code
        self.stopping.set()

    def _on_term(self, signum, _frame) -> None:
        self._term_count += 1
        if self._term_count > 1:
            self.log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(EXIT_CRASH)
        self.log.info("%s: shutting down", signal.Signals(signum).name)
        self.stopping.set()

    def _on_hup(self, _signum, _frame) -> None:
        threading.Thread(target=self.reload, daemon=True).start()

    def main(self, argv: list[str] | None = None) -> int:
        parser = argparse.ArgumentParser(prog=self.program, description=self.description)
        # A version action exits before the required options are checked, so `spurstepd --version` answers too.
        parser.add_argument(
            "--version",
            action="version",
            version=buildinfo.describe(self.program),
            help="print version and build, then exit",
        )
        parser.add_argument("--log-level", help="override [log] level")
        self.add_arguments(parser)
        args = parser.parse_args(argv)
        self.notifier = sdnotify.Notifier.from_environment()
        logging.basicConfig(
            level=(args.log_level or "INFO").upper(),
            format=f"%(asctime)s {self.program}[%(process)d] %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        try:
            self.configure(args)
            self._log_config_risks()
            signal.signal(signal.SIGTERM, self._on_term)
            signal.signal(signal.SIGINT, self._on_term)
            signal.signal(signal.SIGHUP, self._on_hup)
            self.start()
        except (ConfigError, StartupError) as exc:
            print(f"{self.program}: error: {exc}", file=sys.stderr)
            self._safe_stop()
            return EXIT_REFUSED
        except Exception:
            self.log.exception("unexpected error while starting (exit status %d)", EXIT_CRASH)
            self._safe_stop()
            return EXIT_CRASH
        self.log.info("%s started", buildinfo.describe(self.program))
        self.notifier.ready()  # start() returns once the daemon serves: systemctl start may return now
        try:
            self.wait()
        except Exception:
            self.log.exception("unexpected error while serving")
            self.request_stop(EXIT_CRASH)
        finally:
            self.notifier.stopping()
            self._safe_stop()
        self.log.info(f"stopped (exit status {self.exit_code})" if self.exit_code else "stopped")
        return self.exit_code

    def _log_config_risks(self) -> None:
        """Risks the configuration accepts on purpose (an opt-in) are said once, loudly, at start."""
        loaded = getattr(self, "conf", None)
        if loaded is not None and self.conf_role:
            for line in startup_warnings(loaded, self.conf_role):
                self.log.warning(line)

    def _safe_stop(self) -> None:
        try:
            self.stop()
        except Exception:
            self.log.exception("error while stopping")
            self.request_stop(EXIT_CRASH)  # not a clean stop: the exit status says so


def set_log_level(level: str) -> None:
    logging.getLogger().setLevel(level.upper())
