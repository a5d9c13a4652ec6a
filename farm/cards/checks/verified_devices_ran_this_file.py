"""A device listed as verified ran this very file (or one carrying its TFLite section byte for
byte) and passed; re-derived from the raw device rows and section hashes, not from the carry-over
flags. The seeds' apology: a phone listed as verified that never ran the file."""

from __future__ import annotations

import re

from farm.cards.checks.base import CARD_CHECKS


def _raw_runs(facts) -> dict[int, tuple[dict, dict, dict]]:
    """{device result id: (run, the file it ran on, the variant's current file)} from the raw rows."""
    out = {}
    for v in facts["variants"]:
        for h in v["history"]:
            for d in h["devices"]:
                out[d["id"]] = (d, h, v["history"][0])
    return out


@CARD_CHECKS.register("verified_devices_ran_this_file", order=10)
def verified_devices_ran_this_file(card, facts, markdown, devices) -> list[str]:
    """Re-derived from the raw device rows and section hashes, not from the carry-over flags."""
    runs = _raw_runs(facts)
    out = []
    for e in (card.get("device") or {}).get("records", []):
        run = e["run"]
        if not run["runs"]:
            continue
        m = re.search(r"device_results #(\d+)", e.get("source", ""))
        raw = runs.get(int(m.group(1))) if m else None
        claim = f"{e['device']} is listed as verified on {run['accelerator']}"
        if raw is None:
            out.append(f"{claim}, but it cites no recorded device run of this model's files")
            continue
        d, ran_on, current = raw
        if d["status"] != "verified" or d["accelerator"] != run["accelerator"] or d["device_id"] != e["device"]:
            out.append(f"{claim}, but its run #{d['id']} is {d['status']} on {d['device_id']} {d['accelerator']}")
        elif ran_on["sha256"] != current["sha256"] and (
                not ran_on["sections"].get("TFLiteModel")
                or ran_on["sections"].get("TFLiteModel") != current["sections"].get("TFLiteModel")):
            out.append(f"{claim}, but its run #{d['id']} measured {ran_on['sha256'][:12]}, whose TFLite section the "
                       f"current file {current['sha256'][:12]} does not carry: no passing run of the current file")
        if any(x["status"] == "does_not_fit" and x["device_id"] == e["device"] for x in current["devices"]):
            out.append(f"{claim} although the current file {current['sha256'][:12]} was measured not to fit it")
    return out
