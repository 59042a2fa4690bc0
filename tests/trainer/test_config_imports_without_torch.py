import subprocess
import sys


def test_config_task_and_answers_import_without_torch_or_transformers():
    code = (
        "import sys, trainer, trainer.config, trainer.kinds, trainer.formats.answers, trainer.builtin_datasets.arithmetic\n"
        "loaded = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
        "trainer.kinds.config_from_dict('dpo', {'model': 'm', 'output_dir': 'o'})\n"
        "trainer.builtin_datasets.arithmetic.preference_rows(2, 'train', 5)\n"
        "assert 'torch' not in sys.modules\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
