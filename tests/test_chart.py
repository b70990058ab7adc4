"""The Helm chart (deploy/helm/agent-reach), linted and rendered with helm-python-sdk (Helm v4's
SDK, no helm binary), every rendered manifest validated against Kubernetes' own schemas
(kubernetes-validate, strict: unknown fields fail) for the oldest version the chart supports and
the newest the package knows; HTTPRoute and ServiceMonitor against their CRDs' schemas
(tests/data/crd-schemas.json). Then what the issue asks of it: probes, the Secret reference, the
checksum that rolls the pods, no secret value in values.yaml, the toggles, the security context,
Redis as the fleet's state, and a grace period above serve's shutdown timeout."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from agent_reach.config import load_config
from agent_reach.state.redis import RedisStore

from .services import RedisServer

ROOT = Path(__file__).parents[1]
CHART = ROOT / "deploy" / "helm" / "agent-reach"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
CRDS = json.loads((Path(__file__).parent / "data" / "crd-schemas.json").read_text())
KUBE_VERSIONS = ["1.30", latest_version()]  # Chart.yaml's kubeVersion floor, the newest known
CONFIGMAP = "agent-reach/templates/configmap.yaml"

TOGGLES: dict[str, dict[str, Any]] = {
    "ingress": {"ingress": {"enabled": True, "className": "nginx"}},
    "httproute": {"httpRoute": {"enabled": True, "parentRefs": [{"name": "public"}]}},
    "hpa": {"autoscaling": {"enabled": True}},
    "hpa-in-flight": {"autoscaling": {"enabled": True, "inFlight": {"enabled": True}}},
    "servicemonitor": {
        "serviceMonitor": {
            "enabled": True,
            "bearerTokenSecret": {"name": "agent-reach-keys", "key": "METRICS_CLIENT_KEY"},
        }
    },
    "no-redis": {"redis": {"url": ""}},
}
ALL_ON = {  # every optional object at once
    **TOGGLES["ingress"],
    **TOGGLES["httproute"],
    **TOGGLES["hpa-in-flight"],
    **TOGGLES["servicemonitor"],
}
CASES = ["defaults", *TOGGLES, "all"]


def values_for(case: str) -> dict[str, Any]:
    return {"defaults": {}, "all": ALL_ON}[case] if case in {"defaults", "all"} else TOGGLES[case]


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> dict[str, str]:
    return chart.render(values or {}, name="agent-reach", namespace="llm")


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    found = []
    for path, text in rendered.items():
        if path.endswith(".yaml"):
            found += [doc for doc in yaml.safe_load_all(text) if doc]
    return found


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds: dict[str, dict[str, Any]] = {}
    for doc in docs:
        assert doc["kind"] not in kinds, f"two {doc['kind']}s"
        kinds[doc["kind"]] = doc
    return kinds


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (only,) = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(only)


def _strict(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema that rejects unknown fields, as the API server
    does under `kubectl --validate=strict`."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate(doc: dict[str, Any], version: str) -> None:
    crd = CRDS.get(f"{doc['apiVersion']}/{doc['kind']}")
    if crd is None:
        kubernetes_validate.validate(doc, version, strict=True)
        return
    schema = _strict(crd)
    schema["properties"]["metadata"] = {"type": "object"}  # the API server's, not the CRD's
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


# -- lint and validation ----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_chart_lints_clean(case: str) -> None:
    report = helm.lint(CHART, values_for(case), strict=True, kube_version=f"v{KUBE_VERSIONS[-1]}.0")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert problems == [], problems


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_every_rendered_manifest_is_valid(chart: helm.Chart, case: str, version: str) -> None:
    docs = manifests(render(chart, values_for(case)))
    assert docs
    for doc in docs:
        validate(doc, version)


def test_each_toggle_renders_its_object(chart: helm.Chart) -> None:
    defaults = set(by_kind(manifests(render(chart))))
    assert defaults == {
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    }
    added = {
        "ingress": "Ingress",
        "httproute": "HTTPRoute",
        "hpa": "HorizontalPodAutoscaler",
        "servicemonitor": "ServiceMonitor",
    }
    for toggle, kind in added.items():
        assert set(by_kind(manifests(render(chart, TOGGLES[toggle])))) == defaults | {kind}


def test_the_schemas_catch_a_misspelt_field(chart: helm.Chart) -> None:
    docs = by_kind(manifests(render(chart, TOGGLES["httproute"])))
    route, deployment = docs["HTTPRoute"], docs["Deployment"]
    route["spec"]["rules"][0]["timeout"] = "1h"  # `timeouts`
    with pytest.raises(AssertionError, match="'timeout' was unexpected"):
        validate(route, KUBE_VERSIONS[-1])
    pod = deployment["spec"]["template"]["spec"]
    pod["containers"][0]["livenesProbe"] = pod["containers"][0].pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="livenesProbe"):
        validate(deployment, KUBE_VERSIONS[-1])


# -- what the Deployment promises -------------------------------------------------------------


def test_probes_liveness_and_startup_on_healthz_readiness_on_readyz(chart: helm.Chart) -> None:
    c = container(manifests(render(chart)))
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_keys_come_from_the_existing_secret(chart: helm.Chart) -> None:
    docs = manifests(render(chart, {"existingSecret": "team-llm-keys"}))
    assert container(docs)["envFrom"] == [{"secretRef": {"name": "team-llm-keys"}}]
    assert "Secret" not in by_kind(docs)  # the chart never makes one
    with pytest.raises(helm.HelmRenderError, match="existingSecret"):
        render(chart, {"existingSecret": ""})


def test_the_config_checksum_rolls_the_pods_on_a_config_change(chart: helm.Chart) -> None:
    def checksum(values: dict[str, Any] | None = None) -> tuple[str, str]:
        rendered = render(chart, values)
        deployment = by_kind(manifests(rendered))["Deployment"]
        annotation = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return annotation, hashlib.sha256(rendered[CONFIGMAP].encode()).hexdigest()

    annotation, actual = checksum()
    assert annotation == actual
    assert checksum()[0] == annotation  # stable: the same config rolls nothing
    changed = {"config": {**VALUES["config"], "circuit": {"failures": 3}}}
    assert checksum(changed)[0] != annotation
    assert checksum({"redis": {"url": "redis://other:6379/0"}})[0] != annotation


def test_no_secret_value_in_values_yaml() -> None:
    text = (CHART / "values.yaml").read_text()
    secretish = re.compile(r"(key|token|password|secret|credential)", re.IGNORECASE)

    def walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(node, dict):
            for k, v in node.items():
                yield from walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from walk(v, f"{path}[{i}]")
        else:
            yield path, node

    for path, value in walk(VALUES, ""):
        if secretish.search(path.rsplit(".", 1)[-1]) and isinstance(value, str) and value:
            # a name (of a variable, a Secret, one of its keys), never a value
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", value), (path, value)
            assert value.isupper() or "-" in value, (path, value)
    assert not re.search(r"\bsk-[A-Za-z0-9]{8,}|ghp_\w{20,}|AKIA[0-9A-Z]{16}", text)
    unexpanded = re.sub(r"\$\{[A-Z_]+(:-[^}]*)?\}", "", text)  # `${VAR}` names a variable
    assert not re.search(r"redis://[^\s@]*:[^\s@$]+@", unexpanded)  # no password in a URL
    providers = VALUES["config"]["providers"]
    assert all("api_key" not in p and p.get("api_key_env", "X").isupper() for p in providers)


def test_the_rendered_config_is_one_agent_reach_loads(chart: helm.Chart, tmp_path: Path) -> None:
    rendered = by_kind(manifests(render(chart)))["ConfigMap"]["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(rendered)
    config = load_config(path)
    assert config.state == "redis://:@agent-reach-redis:6379/0"  # the fleet's (protocol §12.1)
    assert config.server.api_keys_env == "AGENT_REACH_API_KEYS"
    assert [p.name for p in config.providers] == ["deepseek-official", "zhipu-api"]

    alone = by_kind(manifests(render(chart, TOGGLES["no-redis"])))["ConfigMap"]
    assert "state" not in yaml.safe_load(alone["data"]["config.yaml"])  # SQLite on the emptyDir


def test_redis_password_comes_from_the_environment(chart: helm.Chart) -> None:
    url = "rediss://:${REDIS_PASSWORD}@redis.example:6380/0"
    config = by_kind(manifests(render(chart, {"redis": {"url": url}})))["ConfigMap"]
    assert yaml.safe_load(config["data"]["config.yaml"])["state"] == url


@pytest.mark.redis
@pytest.mark.parametrize("password", ["s3cret-redis-pw", None])
async def test_the_default_redis_url_takes_the_secrets_password(
    chart: helm.Chart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str | None
) -> None:
    """Issue 47: the Secret's REDIS_PASSWORD, when it holds one, is the password of the default
    Redis URL; none when it does not. Tried against a real redis-server, with and without
    `--requirepass`."""
    state = yaml.safe_load(by_kind(manifests(render(chart)))["ConfigMap"]["data"]["config.yaml"])
    assert state["state"] == "redis://:${REDIS_PASSWORD:-}@agent-reach-redis:6379/0"
    server = RedisServer(tmp_path, password=password)
    server.start()
    try:
        here = state["state"].replace("agent-reach-redis:6379", f"127.0.0.1:{server.port}")
        (tmp_path / "config.yaml").write_text(yaml.safe_dump({**state, "state": here}))
        if password is None:
            monkeypatch.delenv("REDIS_PASSWORD", raising=False)
        else:
            monkeypatch.setenv("REDIS_PASSWORD", password)
        store = RedisStore(load_config(tmp_path / "config.yaml").state)
        try:
            assert await store.redis.ping() is True
        finally:
            await store.redis.aclose()
    finally:
        server.kill()


def test_a_redis_ca_from_a_secret_is_mounted_and_named(chart: helm.Chart) -> None:
    url = "rediss://:${REDIS_PASSWORD}@redis.example:6380/0"
    docs = by_kind(manifests(render(chart, {"redis": {"url": url, "tlsCaSecret": "redis-ca"}})))
    state = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])["state"]
    assert state == url + "?ssl_ca_certs=/etc/agent-reach-redis-ca/ca.crt"
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "redis-ca"]
    assert volume["secret"] == {
        "secretName": "redis-ca",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["redis-ca"]["mountPath"] == "/etc/agent-reach-redis-ca"
    for version in KUBE_VERSIONS:
        validate(docs["Deployment"], version)
    with pytest.raises(helm.HelmRenderError, match="must be a rediss:// URL"):
        render(chart, {"redis": {"tlsCaSecret": "redis-ca"}})


def test_rollouts_keep_every_pod_serving_and_spread_them(chart: helm.Chart) -> None:
    spec = by_kind(manifests(render(chart)))["Deployment"]["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spread = spec["template"]["spec"]["topologySpreadConstraints"]
    assert {s["topologyKey"] for s in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    assert all(s["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"] for s in spread)
    with pytest.raises(helm.HelmRenderError, match="replicaCount must be 2"):
        render(chart, {"replicaCount": 1})
    pdb = by_kind(manifests(render(chart)))["PodDisruptionBudget"]["spec"]
    assert pdb["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_the_grace_period_outlasts_the_shutdown_timeout(chart: helm.Chart) -> None:
    def grace_and_waits(values: dict[str, Any] | None = None) -> tuple[int, float, float]:
        """The grace period, serve's shutdown timeout and what comes before it (the preStop
        sleep and serve's drain delay)."""
        docs = manifests(render(chart, values))
        pod = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
        args = dict(a.split("=", 1) for a in container(docs)["args"] if "=" in a)
        sleep = container(docs).get("lifecycle", {}).get("preStop", {}).get("sleep", {})
        before = sleep.get("seconds", 0) + float(args["--drain-delay"])
        return pod["terminationGracePeriodSeconds"], float(args["--shutdown-timeout"]), before

    grace, timeout, before = grace_and_waits()
    assert grace > before + timeout >= 60, (grace, before, timeout)  # an agent's stream
    assert before == 5  # serve's drain delay; no preStop sleep
    grace, timeout, before = grace_and_waits({"server": {"shutdownTimeoutSeconds": 600}})
    assert grace > before + timeout == 605
    assert grace_and_waits({"preStopSleepSeconds": 10})[2] == 15
    assert grace_and_waits({"terminationGracePeriodSeconds": 400})[0] == 400
    with pytest.raises(helm.HelmRenderError, match="terminationGracePeriodSeconds"):
        render(chart, {"terminationGracePeriodSeconds": 300})


def test_it_runs_as_the_images_user_read_only_with_no_capabilities(chart: helm.Chart) -> None:
    docs = manifests(render(chart))
    pod = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
    build = (ROOT / "deploy" / "image" / "build.py").read_text()
    assert "UID = GID = 10001" in build  # the image's user, the one the chart asks for
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["automountServiceAccountToken"] is False
    c = container(docs)
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/var/lib/agent-reach"] == "state"  # HOME: the SQLite state, writable
    assert mounts["/etc/agent-reach"] == "config"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["state"]
    assert volumes["config"]["configMap"]["name"] == by_kind(docs)["ConfigMap"]["metadata"]["name"]
    assert c["command"] == ["/opt/agent-reach/bin/agent-reach", "serve"]


# -- the optional objects ---------------------------------------------------------------------


def test_the_ingress_lets_streams_and_websockets_run(chart: helm.Chart) -> None:
    ingress = by_kind(manifests(render(chart, TOGGLES["ingress"])))["Ingress"]
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(notes["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "agent-reach", "port": {"name": "http"}}


def test_the_httproute_has_stream_friendly_timeouts(chart: helm.Chart) -> None:
    route = by_kind(manifests(render(chart, TOGGLES["httproute"])))["HTTPRoute"]
    (rule,) = route["spec"]["rules"]
    assert rule["timeouts"] == {"request": "3600s", "backendRequest": "3600s"}
    assert rule["backendRefs"] == [{"name": "agent-reach", "port": 8000}]
    assert route["spec"]["parentRefs"] == [{"name": "public"}]
    with pytest.raises(helm.HelmRenderError, match="parentRefs"):
        render(chart, {"httpRoute": {"enabled": True}})


def test_the_autoscaler_owns_the_replica_count(chart: helm.Chart) -> None:
    docs = by_kind(manifests(render(chart, TOGGLES["hpa-in-flight"])))
    assert "replicas" not in docs["Deployment"]["spec"]
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    assert hpa["minReplicas"] >= 2
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "agent-reach",
    }
    metrics = {m["type"]: m for m in hpa["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "agent_reach_requests_in_flight"
    cpu_only = by_kind(manifests(render(chart, TOGGLES["hpa"])))["HorizontalPodAutoscaler"]
    assert [m["type"] for m in cpu_only["spec"]["metrics"]] == ["Resource"]


def test_the_servicemonitor_scrapes_metrics_with_a_client_key(chart: helm.Chart) -> None:
    docs = by_kind(manifests(render(chart, TOGGLES["servicemonitor"])))
    monitor = docs["ServiceMonitor"]["spec"]
    (endpoint,) = monitor["endpoints"]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"] == {
        "name": "agent-reach-keys",
        "key": "METRICS_CLIENT_KEY",
    }
    assert monitor["selector"]["matchLabels"] == docs["Service"]["spec"]["selector"]
