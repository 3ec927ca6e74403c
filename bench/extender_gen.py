#!/usr/bin/python3
"""Writes the extender benchmark's inputs into DIR: nodes-N.json (a NodeList of
N nodes x 8 GPUs, inventory annotation with NVLink topology, four GPU models)
and filter-N.json / prioritize-N.json (ExtenderArgs with all N NodeNames and
a one-GPU pod, as kube-scheduler sends them with nodeCacheCapable: true).

usage: bench/extender_gen.py DIR N [N ...]
"""
import json
import os
import sys

MODELS = [("NVIDIA A100-SXM4-80GB", 81920), ("NVIDIA H100 80GB HBM3", 81559),
          ("Tesla-V100-SXM2-32GB", 32768), ("Tesla-T4", 15360)]


def node(i):
    model, mem = MODELS[i % len(MODELS)]
    name = f"node-{i:05d}"
    gpus = [{"index": g, "uuid": f"GPU-{i:05d}-{g}", "model": model, "memory_mib": mem,
             "numa_node": g // 4, "healthy": True,
             "links": [{"gpu": h, "type": "nvlink" if h // 4 == g // 4 else "sys"}
                       for h in range(8) if h != g]} for g in range(8)]
    inv = {"version": 1, "updated_at": "2026-11-22T00:00:00Z", "gpus": gpus}
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": model,
                                                  "kubernetes.io/hostname": name},
                         "annotations": {"gpusched.io/gpu-inventory": json.dumps(inv)}},
            "status": {"allocatable": {"cpu": "96", "memory": "1024Gi", "pods": "110"}}}


def main():
    out, counts = sys.argv[1], [int(n) for n in sys.argv[2:]]
    os.makedirs(out, exist_ok=True)
    pod = {"metadata": {"name": "bench", "namespace": "default", "uid": "bench-uid"},
           "spec": {"containers": [{"name": "c", "resources": {
               "limits": {"nvidia.com/gpu": "1"}}}]}}
    for n in counts:
        nodes = [node(i) for i in range(n)]
        with open(f"{out}/nodes-{n}.json", "w") as f:
            json.dump({"apiVersion": "v1", "kind": "NodeList", "items": nodes}, f)
        args = {"Pod": pod, "Nodes": None,
                "NodeNames": [x["metadata"]["name"] for x in nodes]}
        for verb in ("filter", "prioritize"):
            with open(f"{out}/{verb}-{n}.json", "w") as f:
                json.dump(args, f)


if __name__ == "__main__":
    main()
