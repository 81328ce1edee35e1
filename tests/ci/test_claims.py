"""Stages side by side share a venv only when the wheels they need on top agree."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from ci.engine.claims import VenvClaims

VENV = Path("venv-a")


def enters_while_held(claims: VenvClaims, held: dict, wanted: dict, venv: Path = VENV) -> bool:
    """Whether a claim of `wanted` gets in while another holds `held` (waits up to 0.3 s)."""
    entered = threading.Event()

    def second():
        with claims.claim(venv, wanted):
            entered.set()

    with claims.claim(VENV, held):
        worker = threading.Thread(target=second)
        worker.start()
        got_in = entered.wait(0.3)
    worker.join(2)
    assert entered.is_set(), "the waiting claim never got in after the venv was free"
    return got_in


def test_same_wheels_share_the_venv():
    assert enters_while_held(VenvClaims(), {"opforge_torch": "a.whl"}, {"opforge_torch": "a.whl"})


def test_another_wheel_of_a_distribution_in_use_waits():
    assert not enters_while_held(VenvClaims(), {"opforge_torch": "a.whl"},
                                 {"opforge_torch": "b.whl"})


def test_disjoint_wheels_and_builds_share():
    claims = VenvClaims()
    assert enters_while_held(claims, {"opforge_torch": "a.whl"}, {"opforge_trt": "t.whl"})
    assert enters_while_held(claims, {"opforge_torch": "a.whl"}, {})


def test_other_venvs_do_not_wait():
    assert enters_while_held(VenvClaims(), {"opforge_torch": "a.whl"}, {"opforge_torch": "b.whl"},
                             venv=Path("venv-b"))


def test_waiting_claim_gets_in_as_soon_as_the_holder_leaves():
    claims = VenvClaims()
    order = []

    def later():
        with claims.claim(VENV, {"x": "2"}):
            order.append("second")

    with claims.claim(VENV, {"x": "1"}):
        worker = threading.Thread(target=later)
        worker.start()
        time.sleep(0.1)
        order.append("first done")
    worker.join(2)
    assert order == ["first done", "second"]
