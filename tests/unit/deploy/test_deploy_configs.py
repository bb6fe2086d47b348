"""deploy/: the cluster-launcher YAML, the KubeRay manifest and the local-cluster script's
argument handling (nothing is started here; see tests/integration for a real cluster)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
SCRIPT = DEPLOY / "local-cluster.sh"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(data, dict)
    return data


# --- Ray cluster launcher --------------------------------------------------------------


def test_cluster_yaml_key_fields() -> None:
    cfg = load("cluster.yaml")
    assert cfg["cluster_name"] == "coalloc"
    provider = cfg["provider"]
    assert provider["type"] == "local"
    assert provider["head_ip"] and provider["head_ip"] not in provider["worker_ips"]
    assert cfg["max_workers"] == len(provider["worker_ips"]) >= 1
    # The project is copied to every node and pip-installed from there.
    (target, source), = cfg["file_mounts"].items()
    assert source == "."
    assert any("pip install" in c and target in c for c in cfg["setup_commands"])
    head = " ".join(cfg["head_start_ray_commands"])
    worker = " ".join(cfg["worker_start_ray_commands"])
    port = re.search(r"ray start --head .*--port=(\d+)", head)
    assert port is not None
    assert f"ray start --address=$RAY_HEAD_IP:{port.group(1)}" in worker


def test_cluster_yaml_passes_rays_own_validation() -> None:
    util = pytest.importorskip("ray.autoscaler._private.util")
    cfg = load("cluster.yaml")
    prepared = util.prepare_config(copy.deepcopy(cfg))
    util.validate_config(prepared)  # raises on a schema violation
    (node_type,) = prepared["available_node_types"].values()
    assert node_type["min_workers"] == node_type["max_workers"] == cfg["max_workers"]


# --- KubeRay -----------------------------------------------------------------------------


def pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest["spec"]
    return [spec["headGroupSpec"]["template"]["spec"]] + [
        group["template"]["spec"] for group in spec["workerGroupSpecs"]
    ]


def test_kuberay_manifest_key_fields() -> None:
    manifest = load("kuberay.yaml")
    assert manifest["apiVersion"] == "ray.io/v1"
    assert manifest["kind"] == "RayCluster"
    spec = manifest["spec"]
    assert "rayStartParams" in spec["headGroupSpec"]
    (group,) = spec["workerGroupSpecs"]
    assert group["groupName"]
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    assert group["replicas"] >= 1


def test_kuberay_images_match_ray_version_and_python() -> None:
    manifest = load("kuberay.yaml")
    version = manifest["spec"]["rayVersion"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    requires = re.search(r'requires-python\s*=\s*">=3\.(\d+)"', pyproject)
    assert requires is not None
    for pod in pod_specs(manifest):
        for container in pod["containers"] + pod.get("initContainers", []):
            image = re.fullmatch(r"rayproject/ray:([\d.]+)-py3(\d+)", container["image"])
            assert image is not None, container["image"]
            assert image.group(1) == version
            assert int(image.group(2)) >= int(requires.group(1))


def test_kuberay_pods_install_coalloc_onto_pythonpath() -> None:
    for pod in pod_specs(load("kuberay.yaml")):
        (init,) = pod["initContainers"]
        command = " ".join(init["command"] + init["args"])
        assert "pip install" in command and "$COALLOC_PIP_SPEC" in command
        target = re.search(r"--target=(\S+)", command)
        assert target is not None
        (mount,) = init["volumeMounts"]
        assert mount["mountPath"] == target.group(1)
        volumes = {v["name"] for v in pod["volumes"]}
        assert mount["name"] in volumes
        (ray_container,) = pod["containers"]
        env = {e["name"]: e["value"] for e in ray_container["env"]}
        assert env["PYTHONPATH"] == target.group(1)
        assert {m["name"]: m["mountPath"] for m in ray_container["volumeMounts"]} == {
            mount["name"]: mount["mountPath"]
        }
        requests = ray_container["resources"]["requests"]
        assert {"cpu", "memory"} <= set(requests)


# --- local-cluster.sh argument handling (starts nothing) ------------------------------------


def run_script(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COALLOC_CLUSTER_DIR=str(tmp_path / "c"))
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_script_is_executable_and_parses() -> None:
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)


def test_script_usage_and_bad_arguments(tmp_path: Path) -> None:
    usage = run_script(tmp_path=tmp_path)
    assert usage.returncode == 2 and "start N" in usage.stdout and "coalloc_mhz" in usage.stdout
    bad = run_script("start", "two", tmp_path=tmp_path)
    assert bad.returncode == 2
    assert "N (number of workers) must be an integer >= 0, got 'two'" in bad.stderr
    option = run_script("start", "1", "--frobnicate", tmp_path=tmp_path)
    assert option.returncode == 2 and "unknown option '--frobnicate'" in option.stderr
    count = run_script("start", "2", "--mhz", "300,450", tmp_path=tmp_path)
    assert count.returncode == 2
    assert "--mhz needs 3 speeds (head and 2 workers), got 2" in count.stderr
    zero = run_script("start", "1", "--mhz=0,450", tmp_path=tmp_path)
    assert zero.returncode == 2 and "--mhz[0]: '0' is not a whole number" in zero.stderr
    assert not (tmp_path / "c" / "cluster.env").exists()


def test_script_stop_and_status_without_a_cluster(tmp_path: Path) -> None:
    stop = run_script("stop", tmp_path=tmp_path)
    assert stop.returncode == 0 and "nothing to stop" in stop.stdout
    status = run_script("status", tmp_path=tmp_path)
    assert status.returncode == 3 and "not running" in status.stdout
    address = run_script("address", tmp_path=tmp_path)
    assert address.returncode == 2


def test_script_refuses_a_too_long_state_dir(tmp_path: Path) -> None:
    if shutil.which("ray") is None:
        pytest.skip("the check runs after the ray CLI check")
    long_dir = tmp_path / ("x" * 80)
    env = dict(os.environ, COALLOC_CLUSTER_DIR=str(long_dir))
    result = subprocess.run(
        ["bash", str(SCRIPT), "start", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "too long for Ray's unix sockets" in result.stderr


def test_script_rejects_an_unknown_auth_mode(tmp_path: Path) -> None:
    env = dict(os.environ, COALLOC_CLUSTER_DIR=str(tmp_path / "c"), RAY_AUTH_MODE="maybe")
    result = subprocess.run(
        ["bash", str(SCRIPT), "status"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "RAY_AUTH_MODE must be token or disabled, got 'maybe'" in result.stderr
