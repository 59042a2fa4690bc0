"""Artifacts of an external run through the client: logged from the run (also after finish), listed, downloaded
back byte for byte with their name and length; a file past the server's limit, a bad name and a Preflab-trained
run are refused with a clear error and leave nothing."""

import hashlib

import pytest
from preflab_client import ApiError

from webapp.experiments.artifacts import artifacts_dir

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_external_runs_files_go_up_and_come_back(preflab, tmp_path):
    table = tmp_path / "eval.csv"
    table.write_text("prompt,score\n" + "".join(f"q{index},{index / 10}\n" for index in range(2000)))
    weights = tmp_path / "adapter.bin"
    weights.write_bytes(bytes(range(256)) * 5000)

    with preflab.init_run("with files") as run:
        run.log({"loss": 1.0}, step=1)
        stored = run.log_artifact(table, kind="table")
    assert stored["name"] == "eval.csv" and stored["kind"] == "table" and stored["size"] == table.stat().st_size
    assert stored["sha256"] == hashlib.sha256(table.read_bytes()).hexdigest()
    # after finish(): a final evaluation's file is still taken
    run.log_artifact(weights, name="final-adapter.bin", kind="model")

    listed = preflab.artifacts(run.id)
    assert [(item["name"], item["kind"], item["size"]) for item in listed] == [
        ("eval.csv", "table", table.stat().st_size), ("final-adapter.bin", "model", weights.stat().st_size)]
    copy = preflab.download_artifact(run.id, "final-adapter.bin", tmp_path / "back")
    assert copy == tmp_path / "back" and copy.read_bytes() == weights.read_bytes()
    (tmp_path / "into").mkdir()
    assert preflab.download_artifact(run.id, "eval.csv", tmp_path / "into").read_bytes() == table.read_bytes()

    response = preflab.request("GET", f"runs/{run.id}/artifacts/eval.csv", stream=True)
    with response:
        assert response.headers["Content-Disposition"] == 'attachment; filename="eval.csv"'
        assert int(response.headers["Content-Length"]) == table.stat().st_size

    table.write_text("replaced\n")
    assert run.log_artifact(table)["size"] == len("replaced\n")
    assert [item["kind"] for item in preflab.artifacts(run.id)] == ["file", "model"]


def test_refused_artifacts_say_why_and_leave_nothing(preflab, settings, tmp_path):
    run = preflab.init_run("refusals")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 5000)
    settings.PREFLAB_UPLOAD_MAX_BYTES = 4000

    def refusal(**kwargs) -> ApiError:
        with pytest.raises(ApiError) as refused:
            run.log_artifact(big, **kwargs)
        return refused.value

    error = refusal()
    assert error.status == 413 and "at most 3.9 KiB (PREFLAB_UPLOAD_MAX_BYTES); nothing was stored" in error.detail
    settings.PREFLAB_UPLOAD_MAX_BYTES = 2**20
    error = refusal(name=".hidden")
    assert error.status == 422 and error.detail.startswith("name: '.hidden' is not an artifact name")
    error = refusal(kind="Not A Kind")
    assert error.status == 422 and "kind" in error.detail
    assert preflab.artifacts(run.id) == []
    assert not [path for path in artifacts_dir(run.id).rglob("*") if path.is_file()]
    with pytest.raises(ApiError) as missing:
        preflab.download_artifact(run.id, "nothing.txt", tmp_path / "nothing.txt")
    assert missing.value.status == 404 and missing.value.detail == f"run {run.id} has no artifact 'nothing.txt'"
    assert not (tmp_path / "nothing.txt").exists()
    with pytest.raises(FileNotFoundError):
        run.log_artifact(tmp_path / "not-there.txt")
    run.finish()
