"""Scale-out on torch.distributed: a real 16-process job on this machine as
4 "nodes" x 4 ranks (env:// rendezvous on the loopback, gloo), each node with
its own cache directory over one shared source directory, shuffle="node".

Over two epochs: every sample exactly once per epoch across the 16 ranks; the
source is read once (epoch 0: the dataset's bytes, epoch 1: under 5%); the
source opened (and stat'ed) only to fill a node's copies: each .rec and .idx
once per node that needs it, never ranks x shards, none in epoch 1; each
node's cache holds a quarter of the data. Then the job resumes as 2 nodes x 4 ranks from a
mid-epoch state and finishes the epoch: every sample once. The counters are
printed (pytest -s shows them; tests/run.sh keeps them in its log on failure).
"""

import json

import pytest

import gpufeed

import scaleout_job  # tests/python is on sys.path under pytest


def _needs_gloo():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available")


def _epoch_ids(reports, epoch):
    ids = []
    for report in reports:
        ids += report["epochs"][str(epoch)]
    return ids


def test_node_count_from_torchrun_environment_and_bad_splits(tmp_path, monkeypatch):
    dataset = scaleout_job.make_dataset(tmp_path / "data", records=64, shards=8)
    for name, value in dict(WORLD_SIZE="8", RANK="5", LOCAL_WORLD_SIZE="2",
                            GROUP_RANK="2").items():
        monkeypatch.setenv(name, value)
    raw = gpufeed.RawTransform(shape=(8,))
    loader = gpufeed.DataLoader(dataset, batch_size=2, shuffle="node", transform=raw)
    state = loader.state_dict()
    assert (state["num_nodes"], state["world_size"], state["earlier_splits"]) == (4, 8, [])
    assert len(loader) == 4  # 64 samples over 8 ranks in batches of 2
    ids = [int(i) for _, labels in loader for i in labels.tolist()]
    assert len(ids) == 8
    loader.close()
    with pytest.raises(ValueError, match="contiguous"):
        gpufeed.DataLoader(dataset, batch_size=2, shuffle="node", transform=raw, node_rank=1)
    with pytest.raises(ValueError, match="multiple of num_nodes"):
        gpufeed.DataLoader(dataset, batch_size=2, shuffle="node", transform=raw, num_nodes=3)
    with pytest.raises(ValueError, match="shuffle must be"):
        gpufeed.DataLoader(dataset, shuffle="nodes", transform=raw)


def test_four_nodes_then_resume_on_two(tmp_path):
    _needs_gloo()
    dataset = scaleout_job.make_dataset(tmp_path / "data")
    manifest = json.loads((dataset / "gpufeed.json").read_text())
    shards = manifest["shards"]
    assert len(shards) == 16 and {s["records"] for s in shards} == {64}
    dataset_bytes = sum(s["bytes"] for s in shards)

    reports = scaleout_job.launch(dataset, tmp_path, 4, 4, "train", stop_batches=3)
    summary = scaleout_job.summarize(reports)
    print("\nscale-out job, 4 nodes x 4 ranks, 16 shards of 64 records, "
          f"{dataset_bytes} bytes of shards")
    for key, value in summary.items():
        print(f"  {key:28s} {value}")

    # Every sample exactly once per epoch across the 16 ranks.
    for epoch in (0, 1):
        ids = _epoch_ids(reports, epoch)
        assert sorted(ids) == list(range(scaleout_job.RECORDS)), f"epoch {epoch}"
    # Each node reads only its own shards (16 equal shards over 4 nodes).
    records_per_shard = 64
    for node in range(4):
        shards_read = {i // records_per_shard for r in reports if r["node"] == node
                       for i in r["epochs"]["0"] + r["epochs"]["1"]}
        assert len(shards_read) == 4, (node, shards_read)
    # The source: each shard fetched once for the whole job (by one process
    # of its node), nothing after the first epoch, no metadata per epoch.
    # (The loaders start epoch 0 when they open, so the first fills may fall
    # before the first reading of the counters: count from zero.)
    index_bytes = {i: (dataset / s["index"]).stat().st_size for i, s in enumerate(shards)}
    assert all(s["index_bytes"] == index_bytes[i] for i, s in enumerate(shards))
    through_epoch0 = sum(r["counters"][1]["source_bytes"] for r in reports)
    assert through_epoch0 == dataset_bytes + sum(index_bytes.values())
    assert summary["epoch1.source_bytes"] < 0.05 * dataset_bytes
    # Lazy opens (the manifest identifies every .rec and .idx): nothing is
    # opened when the loaders open; a file is opened on the source only by
    # the process that fills its node's copy, once per node that needs it:
    # 4 nodes x 4 shards x (.rec + .idx) = 32, not 16 processes x 16 x 2.
    files_needed = 0
    for node in range(4):
        shards_read = {i // records_per_shard for r in reports if r["node"] == node
                       for i in r["epochs"]["0"] + r["epochs"]["1"] + r["epochs"]["2"]}
        files_needed += 2 * len(shards_read)
    print(f"  source files the nodes need  {files_needed}")
    assert summary["job.source_opens"] <= files_needed
    assert summary["job.source_stats"] <= files_needed
    assert summary["job.source_opens"] < 16 * 16 * 2
    for name in ("source_opens", "source_stats"):
        assert summary[f"epoch1.{name}"] == 0, f"{name} in epoch 1"
    # Each node's cache holds a quarter of the data.
    cache_bytes = summary["cache_bytes_per_node"]
    assert len(cache_bytes) == 4
    for held in cache_bytes:
        assert held == pytest.approx(dataset_bytes / 4, rel=0.05)

    # Resume as 2 nodes x 4 ranks from the state saved after 3 batches of
    # epoch 2: the rest of the epoch, re-partitioned over 2 nodes.
    state = reports[0]["state"]
    assert state["num_nodes"] == 4 and state["world_size"] == 16
    assert state["epoch"] == 2 and state["consumed"] == 3 * scaleout_job.BATCH * 16
    (tmp_path / "state.json").write_text(json.dumps(state))
    resumed = scaleout_job.launch(dataset, tmp_path, 2, 4, "resume")
    ids = _epoch_ids(reports, 2) + _epoch_ids(resumed, 2)
    assert sorted(ids) == list(range(scaleout_job.RECORDS))
    after = resumed[0]["state_after"]
    assert after["epoch"] == 3 and after["consumed"] == 0
    # The 2 nodes reuse their caches (node0 and node1 of the 4-node job): a
    # node fetches only the shards it reads and its cache does not hold.
    # Their .rec and .idx, and nothing is opened for the shards it holds.
    fetched = sum(r["counters"][-1]["source_bytes"] for r in resumed)
    opened = sum(r["counters"][-1]["source_opens"] for r in resumed)
    expected = expected_files = 0
    for node in (0, 1):
        held = {i // records_per_shard for r in reports if r["node"] == node
                for i in r["epochs"]["0"]}
        read = {i // records_per_shard for r in resumed if r["node"] == node
                for i in r["epochs"]["2"]}
        expected += sum(shards[s]["bytes"] + index_bytes[s] for s in read - held)
        expected_files += 2 * len(read - held)
    print(f"  resume as 2 x 4: source bytes {fetched}, source opens {opened} "
          f"(the {expected_files // 2} shards not in the node's cache)")
    assert fetched == expected
    assert fetched < dataset_bytes
    assert opened <= expected_files
