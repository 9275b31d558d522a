"""deploy/kubernetes: every manifest against the Kubernetes API schemas (kubernetes-validate from PyPI, strict:
an unknown field fails), the references between them, and the spur.conf each pod renders, read by Spur's own
config parser. No cluster is needed; docs/kubernetes.md says what was not run on a real one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from spur_hpc import conf as spur_conf

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
# The oldest release the manifests use features of (sidecar init containers: restartPolicy Always, 1.29).
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")


def kustomization() -> dict:
    return yaml.safe_load((KUBE / "kustomization.yaml").read_text())


def resource_files() -> list[Path]:
    """The kustomization's resources; secret.yaml is the site's own copy of secret.example.yaml."""
    files = []
    for name in kustomization()["resources"]:
        files.append(KUBE / ("secret.example.yaml" if name == "secret.yaml" else name))
    return files


def documents() -> list[dict]:
    docs = []
    for path in resource_files():
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def by_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in documents() if d["kind"] == kind}


def test_every_resource_file_exists_and_the_site_secret_is_not_committed() -> None:
    for path in resource_files():
        assert path.is_file(), f"kustomization.yaml names {path.name}, which does not exist"
    assert not (KUBE / "secret.yaml").exists(), "secret.yaml holds a site's secrets: commit secret.example.yaml only"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_validates_against_the_api_schemas(version: str) -> None:
    for doc in documents():
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError naming the field


def test_a_wrong_field_is_caught() -> None:
    """The validator is strict: the same StatefulSet with an unknown field, or a wrong type, fails."""
    statefulset = by_kind("StatefulSet")["spurctld"]
    bad = yaml.safe_load(yaml.safe_dump(statefulset))
    bad["spec"]["replica"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)
    bad = yaml.safe_load(yaml.safe_dump(statefulset))
    bad["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[0], strict=True)


def pod_specs() -> dict[str, dict]:
    pods = {}
    for kind in ("StatefulSet", "DaemonSet"):
        for name, doc in by_kind(kind).items():
            pods[name] = doc["spec"]["template"]["spec"]
    return pods


def test_every_mount_has_a_volume_and_every_volume_source_exists() -> None:
    config_maps, secrets = by_kind("ConfigMap"), by_kind("Secret")
    for name, pod in pod_specs().items():
        claims = {c["metadata"]["name"] for c in by_kind("StatefulSet").get(name, {}).get("spec", {}).get(
            "volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod.get("initContainers", []) + pod["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in claims, f"{name}/{container['name']}: {mount}"
        for volume in volumes.values():
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps
            if "secret" in volume:
                secret = secrets[volume["secret"]["secretName"]]
                for item in volume["secret"].get("items", []):
                    assert item["key"] in secret["stringData"]


def test_the_controllers_have_probes_a_disruption_budget_and_stable_addresses() -> None:
    statefulset = by_kind("StatefulSet")["spurctld"]
    service = by_kind("Service")[statefulset["spec"]["serviceName"]]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    budget = by_kind("PodDisruptionBudget")["spurctld"]
    assert budget["spec"]["selector"]["matchLabels"] == statefulset["spec"]["selector"]["matchLabels"]
    # A budget that kept a majority of the first bootstrap's controllers
    replicas = statefulset["spec"]["replicas"]
    assert budget["spec"]["maxUnavailable"] <= (replicas - 1) // 2


def render(tmp_path: Path, template: str, **env: str) -> spur_conf.Config:
    templates = tmp_path / "templates"
    templates.mkdir(exist_ok=True)
    data = by_kind("ConfigMap")["spur-conf"]["data"]
    for name, text in data.items():
        (templates / name).write_text(text)
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    for name, value in by_kind("Secret")["spur-secrets"]["stringData"].items():
        (secrets / name).write_text(value)
    run_dir = tmp_path / "run"
    environment = dict(os.environ, RUN_DIR=str(run_dir), SECRETS_DIR=str(secrets),
                       MUNGE_KEY_DIR=str(tmp_path / "munge-key"), **env)
    subprocess.run(["sh", str(templates / "render-conf.sh"), str(templates / template)], check=True,
                   env=environment)
    assert (run_dir / "secrets" / "raft.secret").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "munge-key" / "munge.key").stat().st_mode & 0o777 == 0o400
    return spur_conf.parse((run_dir / "spur.conf").read_text())


def test_each_controller_pod_renders_a_spur_conf_spur_accepts(tmp_path: Path) -> None:
    statefulset = by_kind("StatefulSet")["spurctld"]
    for ordinal in range(statefulset["spec"]["replicas"]):
        config = render(tmp_path, "controller.conf.in", POD_NAME=f"spurctld-{ordinal}", POD_NAMESPACE="spur",
                        POD_IP=f"10.0.0.{ordinal + 1}")
        spur_conf.validate(config, None)
        assert config.controller.raft_addr in config.controller.peers
        assert len(config.controller.peers) == len(config.controller.hosts) == statefulset["spec"]["replicas"]
        assert config.controller.probe_addr == f"10.0.0.{ordinal + 1}:6822"
        assert config.auth.type == "munge"


def test_a_scaled_out_controller_names_itself_and_its_join_sidecar_is_valid(tmp_path: Path) -> None:
    statefulset = by_kind("StatefulSet")["spurctld"]
    pod = statefulset["spec"]["template"]["spec"]
    replicas = str(statefulset["spec"]["replicas"])
    for container in pod["initContainers"] + pod["containers"]:
        for var in container.get("env", []):
            if var["name"] == "BOOTSTRAP_REPLICAS":
                assert var["value"] == replicas, f"{container['name']}: BOOTSTRAP_REPLICAS is not the replicas"
    config = render(
        tmp_path, "controller.conf.in", POD_NAME="spurctld-3", POD_IP="10.0.0.4", BOOTSTRAP_REPLICAS=replicas
    )
    spur_conf.validate(config, None)
    assert config.controller.raft_addr == "spurctld-3.spurctld.spur.svc.cluster.local:6821"
    assert config.controller.peers[-1] == config.controller.raft_addr and len(config.controller.peers) == 4
    join = by_kind("ConfigMap")["spur-conf"]["data"]["spur-join.sh"]
    subprocess.run(["sh", "-n"], input=join, text=True, check=True)
    snippet = join.split("python3 -c '", 1)[1].split("'", 1)[0]
    compile(snippet, "spur-join.sh", "exec")
    assert "spur admin raft add" in join and any(c["name"] == "join" for c in pod["initContainers"])


def test_an_agent_pod_renders_a_spur_conf_spur_accepts(tmp_path: Path) -> None:
    config = render(tmp_path, "agent.conf.in", NODE_NAME="node-17", NODE_IP="10.1.0.17")
    spur_conf.validate(config, None)
    assert config.agent.node_name == "node-17" and config.agent.advertise_addr == "10.1.0.17:6818"
    controllers = render(tmp_path, "controller.conf.in", POD_NAME="spurctld-0", POD_IP="10.0.0.1")
    assert config.controller.hosts == controllers.controller.hosts
