"""The fault campaign (see campaign.py): a short form in the normal suite, the full one marked slow.

    pytest tests/faults                              # short form (well under a minute)
    pytest tests/faults -m slow                      # full campaign, ASYNCNET_FAULT_TRIES tries per kind (default 2)
    python tests/faults/campaign.py --tries 3        # the same, printing the table

Any bad try fails the test, with its details.
"""

from __future__ import annotations

import os

import campaign
import pytest


def _assert_no_bad(table):
    bad = {k: t.details for k, t in table.items() if t.bad}
    assert not bad, "\n".join(f"{k}: {d}" for k, ds in bad.items() for d in ds)
    assert all(t.tries for t in table.values())


@pytest.mark.timeout(300)
def test_short_campaign():
    _assert_no_bad(campaign.run_campaign(dict(campaign.SHORT), seed=2026))


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_full_campaign(request):
    if "slow" not in (request.config.getoption("markexpr", "") or ""):
        pytest.skip("the full campaign (minutes) runs when asked for: pytest tests/faults -m slow")
    tries = int(os.environ.get("ASYNCNET_FAULT_TRIES", "2"))
    plan = {k: tries * (campaign.FUZZ_PER_TRY if k.startswith("fuzz_") else 1) for k in campaign.ALL_KINDS}
    _assert_no_bad(campaign.run_campaign(plan, seed=int(os.environ.get("ASYNCNET_FAULT_SEED", "0"))))
