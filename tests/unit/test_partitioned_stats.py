"""Per-value rates for partitioned plans from ``joinlib stats --values``: the file gives the partition
function the data would (for submitting a continuous query without data), and bad files are clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from joinlib.cli.main import main
from joinlib.data.files import load_streams
from joinlib.errors import PlanError
from joinlib.plan import partitioned as pm
from joinlib.pmjoin import partitioned as choose_pm
from joinlib.query import load_query
from tests.unit.test_pmjoin_stats import write_data


@pytest.mark.parametrize("scheme,parts", [("rate", 2), ("rate", 3), ("range", 2), ("hash", 4), ("site", 0)])
def test_values_file_gives_the_function_the_data_gives(tmp_path: Path, capsys, scheme: str, parts: int) -> None:
    qpath, data = write_data(tmp_path)
    out = tmp_path / "values.json"
    assert main(["stats", str(qpath), "--data", str(data), "--values", str(out)]) == 0
    assert "wrote the rates of 3 values of S1.dest, S2.dest, S3.dest" in capsys.readouterr().out
    stats = json.loads(out.read_text())
    assert stats["values"] == ["a", "b", "c"] and stats["streams"] == ["S1", "S2", "S3"]
    query = load_query(qpath)
    from_data = choose_pm.function_for(query, load_streams(query, data), pm.attribute_class(query), scheme, parts)
    assert choose_pm.function_from_stats(query, stats, scheme, parts).to_json() == from_data.to_json()


def test_rate_partition_of_the_values_file_separates_the_hot_sites(tmp_path: Path) -> None:
    """S1 is mostly c, S2 mostly b, S3 mostly a: three partitions, one value each."""
    qpath, data = write_data(tmp_path)
    query = load_query(qpath)
    fn = choose_pm.function_from_stats(query, choose_pm.value_stats(query, load_streams(query, data)), "rate", 3)
    assert sorted(fn(v) for v in "abc") == [0, 1, 2]


def test_site_partition_sends_each_value_to_the_site_holding_most_of_its_tuples(tmp_path: Path) -> None:
    """S1 (at its site) is mostly c, S2 mostly b, S3 mostly a: c to S1's site's partition, b to S2's, a to S3's
    (issue 30 item 2: results where a value's tuples are born); one partition per site, values unseen hashed."""
    qpath, data = write_data(tmp_path)
    query = load_query(qpath)
    fn = choose_pm.function_from_stats(query, choose_pm.value_stats(query, load_streams(query, data)), "site", 0)
    sites = [query.stream(s).site for s in ("S1", "S2", "S3")]
    assert fn.d == len(set(sites)) == 3
    order = [s for s in query.sites if s in sites]
    assert [fn(v) for v in "cba"] == [order.index(site) for site in sites]
    assert 0 <= fn("never seen") < 3
    assert pm.parse_spec("pmjoin:site") == ("site", 0)
    with pytest.raises(PlanError, match="takes no D"):
        pm.parse_spec("pmjoin:site:3")


@pytest.mark.parametrize("stats,message", [
    (None, "needs per-value rates"),
    ({"values": [1]}, "needs per-value rates"),
    ({"by": [["S9", "dest"]], "streams": [], "values": [], "rates": []}, "is not a [stream, join attribute]"),
    ({"streams": ["S1"], "values": ["a"], "rates": [["x"]]}, "malformed rates"),
])
def test_bad_values_files_are_plan_errors(tmp_path: Path, stats, message: str) -> None:
    qpath, _ = write_data(tmp_path)
    with pytest.raises(PlanError, match=message.replace("[", r"\[")):
        choose_pm.function_from_stats(load_query(qpath), stats, "rate", 2)


@pytest.mark.parametrize("spec", ["pmjoin:0", "pmjoin:hash:5000", "pmjoin:rate:x"])
def test_bad_partition_counts_are_plan_errors(spec: str) -> None:
    with pytest.raises(PlanError, match="from 1 to 1024"):
        pm.parse_spec(spec)


def test_a_plan_message_with_too_many_partitions_is_refused(tmp_path: Path) -> None:
    """A control message naming a million partitions would make every node install a million instances."""
    qpath, _ = write_data(tmp_path)
    query = load_query(qpath)
    obj = {"partitioned": {"by": [["S1", "dest"]], "function": {"kind": "hash", "d": 10**6}, "plans": []}}
    with pytest.raises(PlanError, match="1000000 partitions"):
        pm.Partitioned.from_json(query, obj)
