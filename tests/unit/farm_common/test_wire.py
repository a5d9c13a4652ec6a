"""The wire between the environments (farm_common/wire.py): what the toolchain writes is what the
orchestrator reads, and a line that is not a reply is refused, never read as a success."""

import json
import os

import pytest

from farm.errors import BadInput as FarmBadInput
from farm_common import wire
from farm_toolchain.protocol import BadInput as ToolchainBadInput, handle_one


def test_a_reply_written_by_the_toolchain_reads_back_on_the_orchestrators_side():
    ok, code = handle_one(lambda r: {"sha256": "ab" * 32, "n": r["n"]}, {"n": 3})
    reply = wire.Reply.parse(json.dumps(ok))
    assert code == 0 and reply.ok and reply.fields == {"sha256": "ab" * 32, "n": 3} and reply.error is None

    def refuse(_r):
        raise ToolchainBadInput("no such file: x.gguf")

    bad, code = handle_one(refuse, {})
    reply = wire.Reply.parse(json.dumps(bad))
    assert code == 2 and not reply.ok and reply.error_kind == "bad_input" and reply.error == "no such file: x.gguf"


@pytest.mark.parametrize("line", [
    "not json",
    "[1, 2]",
    json.dumps({"sha256": "ab"}),                       # no ok
    json.dumps({"ok": "yes"}),                          # ok not a boolean
    json.dumps({"ok": False}),                          # a failure without its line
    json.dumps({"ok": False, "error": "x", "error_kind": "oops"}),  # a kind the wire does not know
])
def test_a_line_that_is_not_a_reply_is_refused(line):
    with pytest.raises(ValueError):
        wire.Reply.parse(line)


def test_one_bad_input_on_both_sides():
    assert ToolchainBadInput is wire.BadInput
    assert issubclass(FarmBadInput, wire.BadInput) and FarmBadInput.exit_code == 2


def test_statuses_and_the_worst_of_them():
    assert set(wire.MEASURED) | {"could_not_run"} == set(wire.STATUSES) == set(wire.RANK)
    assert set(wire.FAILING) | set(wire.WORKS) < set(wire.STATUSES)
    assert wire.worst(["pass", "warn", "skipped"]) == "warn"
    assert wire.worst(["pass", "could_not_run", "warn"]) == "could_not_run"
    assert wire.worst(["pass", "fail", "could_not_run"]) == "fail"
    assert wire.worst(["pass", "something-new"]) == "something-new"  # unknown counts as failing
    assert wire.worst([]) is None


def test_the_proc_reader_reads_this_process_and_answers_none_for_a_gone_one():
    rss = wire.proc_status_bytes("VmRSS", os.getpid())
    assert rss is not None and rss > 1 << 20
    assert wire.proc_status_bytes("VmRSS", 2**22 + 7) is None  # above pid_max's default: no such process
    assert wire.proc_status_bytes("NoSuchField") is None
