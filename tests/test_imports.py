"""No import circle in the package: every ``import`` statement of ``ppo_numpy/`` read with
``ast``, those inside functions included (``benchmarks/imports.py``), and the layers of the
objective, the family, the policy loss and the fast forms in one order."""

import os

from benchmarks.imports import above, circles, import_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_import_circle():
    found = circles(import_graph(ROOT))
    assert found == [], found


def test_the_layers_run_one_way():
    # the equations (ppo/) < the family's members (family/) < the policy loss (policy_loss/)
    # < the fast forms (fast/): no module of a lower layer imports one of a higher
    # (fast/gae_blocked.py is the exception, a leaf kernel importing only _checks and ppo/td:
    # the public gae runs it when its caller asks, method="blocked")
    graph = import_graph(ROOT)
    order = ["ppo", "family", "policy_loss", "fast"]
    leaf = os.path.join("ppo_numpy", "fast", "gae_blocked.py")
    layer = {f: f.split(os.sep)[1] for f in graph if f.count(os.sep) > 1 and f != leaf}
    for f, targets in graph.items():
        if layer.get(f) not in order:
            continue
        for t in targets:
            if layer.get(t) in order:
                assert order.index(layer[t]) <= order.index(layer[f]), (f, t)


def test_the_graph_reads_imports_inside_functions():
    graph = import_graph(ROOT)
    kernel = os.path.join("ppo_numpy", "policy_loss", "kernel.py")
    assert above(graph, kernel, os.path.join("ppo_numpy", "family", "losses", "clip.py"))
