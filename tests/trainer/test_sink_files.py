import json
import math

from trainer.sink import FileSink, MemorySink, Sink, read_jsonl, sample_row


def test_file_sink_round_trips_nan_and_inf_as_json(tmp_path):
    sink = FileSink(tmp_path)
    sink.start(total_steps=3, start_step=0)
    sink.log(1, {"loss": 0.5, "kl": float("nan")}, tokens_seen=10)
    sink.log(2, {"loss": float("inf"), "kl": float("-inf")}, tokens_seen=20)
    sink.sample(sample_row(2, "Calculate 1 + 1\n", "<answer>2</answer>", {"correct": 1.0}, advantage=float("nan")))
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert math.isnan(rows[0]["metrics"]["kl"]) and rows[0]["metrics"]["loss"] == 0.5
    assert rows[1]["metrics"]["loss"] == math.inf and rows[1]["metrics"]["kl"] == -math.inf
    assert rows[1]["tokens_seen"] == 20
    assert math.isnan(read_jsonl(tmp_path / "samples.jsonl")[0]["advantage"])


def test_file_sink_rewinds_rows_after_the_resumed_step_and_stops_on_a_file(tmp_path):
    sink = FileSink(tmp_path, stop_file=tmp_path / "STOP")
    for step in (1, 2, 3):
        sink.log(step, {"loss": 1.0}, tokens_seen=step)
    assert not sink.should_stop()
    (tmp_path / "STOP").touch()
    assert sink.should_stop()
    FileSink(tmp_path).start(total_steps=5, start_step=2)
    assert [row["step"] for row in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]


def test_sinks_satisfy_the_protocol():
    assert isinstance(MemorySink(), Sink)
    memory = MemorySink(stop_at_step=2)
    memory.log(1, {"loss": 1.0}, tokens_seen=4)
    assert not memory.should_stop()
    memory.log(2, {"loss": 1.0}, tokens_seen=8)
    assert memory.should_stop()
