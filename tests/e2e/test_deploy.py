"""deploy/ against the real kube-apiserver: every manifest accepted (kubectl apply
--dry-run=server, with the CA bundle filled in as docs/webhook.md says), the CRD and
RBAC applied for real (the cluster fixture applies them) grant exactly what each
component uses, and the scheduler config loads in the real kube-scheduler (the
fixture runs it, translated to v1beta1 for 1.20)."""
import glob
import os

import pytest
import yaml

import kcluster

MANIFESTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(kcluster.ROOT, "deploy",
                                                                       "*.yaml")))


def is_api_objects(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return all("metadata" in d for d in docs)


@pytest.mark.parametrize("manifest", MANIFESTS)
def test_manifest_accepted(cluster, manifest):
    path = os.path.join(kcluster.ROOT, "deploy", manifest)
    if not is_api_objects(path):
        # a component config, not API objects: the scheduler loads it (cluster fixture)
        assert cluster.scheduler.alive()
        return
    with open(path) as f:
        text = f.read()
    if "CA_BUNDLE" in text:
        with open(os.path.join(cluster.workdir, "webhook", "ca-bundle.txt")) as f:
            text = text.replace("CA_BUNDLE", f.read().strip())
    r = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)
    assert r.returncode == 0, f"{manifest} refused by kube-apiserver {kcluster.K8S_VERSION}:\n" \
                              f"{r.stdout}\n{r.stderr}"


def can(cluster, sa, verb, resource, ns=None, name=None):
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, resource + (f"/{name}" if name else ""),
            f"--as=system:serviceaccount:{sa}"]
    if sub:
        args.append(f"--subresource={sub}")
    if ns:
        args.append(f"--namespace={ns}")
    return cluster.kubectl(*args, check=False).stdout.strip() == "yes"


def test_crd_and_rbac_applied(cluster):
    r = cluster.api("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                           "gpuquotas.gpusched.io")
    assert r.status_code == 200
    ext = "gpusched:gpusched-extender"
    for verb, res in (("list", "nodes"), ("watch", "pods"), ("patch", "pods"),
                      ("create", "pods/binding"), ("create", "events"),
                      ("watch", "gpuquotas.gpusched.io")):
        assert can(cluster, ext, verb, res), f"extender cannot {verb} {res}"
    assert can(cluster, ext, "update", "leases.coordination.k8s.io", "gpusched",
               "gpusched-extender")
    assert not can(cluster, ext, "update", "leases.coordination.k8s.io", "gpusched", "other")
    assert not can(cluster, ext, "delete", "pods")
    assert not can(cluster, ext, "patch", "nodes")
