"""`TrainingArguments(report_to="preflab")`: "preflab" as one of transformers' reporting integrations.

transformers (4.x and 5) turns `report_to` names into callbacks through the dict INTEGRATION_TO_CALLBACK of
`transformers.integrations.integration_utils` (get_reporting_integration_callbacks, which answers "preflab is not
supported" for a name it lacks) and makes each callback with no arguments; the dict is the only way in, there is
no entry point. `import preflab_client` puts PreflabCallback in it (`register()`) without importing transformers
(which would cost a plain client script seconds): if that module is loaded already, at once; else when it is
loaded, through an import hook that adds the entry right after the module runs.

A `.pth` file (code run at every interpreter start) was judged less robust: setuptools has no plain way to
install one, it is skipped by `python -S`, by virtual environments that only add the source to PYTHONPATH, and
by editable installs from `src`; and executable .pth lines are on their way to deprecation in CPython. So a
script using report_to="preflab" imports preflab_client (any import of it will do).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

INTEGRATION_NAME = "preflab"
INTEGRATIONS_MODULE = "transformers.integrations.integration_utils"


def _add_to(module: Any) -> None:
    from preflab_client.callback import PreflabCallback

    module.INTEGRATION_TO_CALLBACK.setdefault(INTEGRATION_NAME, PreflabCallback)


class _RegisterWhenLoaded(importlib.abc.MetaPathFinder):
    """Finds transformers' integrations module as the other finders do and adds "preflab" once it has run."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != INTEGRATIONS_MODULE:
            return None
        others = [finder for finder in sys.meta_path if not isinstance(finder, _RegisterWhenLoaded)]
        for finder in others:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _add_to(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... as the real loader answers
        return getattr(self.loader, name)


def register() -> None:
    """Make report_to="preflab" known to transformers, now or when transformers loads its integrations."""
    loaded = sys.modules.get(INTEGRATIONS_MODULE)
    if loaded is not None and hasattr(loaded, "INTEGRATION_TO_CALLBACK"):
        _add_to(loaded)
    elif not any(isinstance(finder, _RegisterWhenLoaded) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterWhenLoaded())
