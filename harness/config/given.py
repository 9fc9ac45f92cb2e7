"""A sweep config as a Python caller gives it: a YAML file's path, a mapping, or a validated
:class:`~harness.config.schema.SweepConfig`, made one :class:`GivenConfig` and validated alike.

- **A path** (``str`` or ``os.PathLike``) is read by :func:`harness.config.load.load_config`, as the
  command line reads it.
- **A mapping** (a notebook's ``dict``) is written out as YAML text and read back by the same
  bounded reader (:func:`harness.config.yamlsafe.load_yaml_text`), then validated by
  :func:`harness.config.load.config_from_data`: every rule a file obeys, the same trial ids as the
  same config in a file. Tuples become lists and numpy scalars Python numbers first; anything else
  YAML cannot hold is a :class:`~harness.config.errors.ConfigError`. Error lines start with
  ``<dict>``; relative ``source:`` and ``search_space:`` paths are relative to the working directory.
- **A** :class:`SweepConfig` (from ``load_config``) has its names, hyperparameters and plan size
  checked again against the registries in use (cheap; a config built by hand gets what a file gets),
  its sources as they were resolved.

The parent run of a sweep logs :attr:`GivenConfig.text` as ``config.yaml`` and records
:attr:`GivenConfig.label` as its ``config_file`` param.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import limits
from harness.config.errors import ConfigError
from harness.config.registries import Registries, default_registries
from harness.config.schema import SweepConfig

__all__ = ["DICT_LABEL", "GivenConfig", "given_config", "load_given"]

#: The ``FILE`` of every error line about a config given as a mapping.
DICT_LABEL = "<dict>"
#: The ``FILE`` of every error line about a config given as a :class:`SweepConfig`.
OBJECT_LABEL = "<SweepConfig>"


@dataclass(frozen=True)
class GivenConfig:
    """One config as given (module docstring).

    Attributes:
      label: what its error lines start with and the parent run's ``config_file`` param: the
        file's path as given, :data:`DICT_LABEL` or :data:`OBJECT_LABEL`.
      folder: relative paths in it resolve against this folder (the file's; else the working
        directory); the ``config_commit`` tag is that folder's repository's.
      path: the file, ``None`` for a mapping or an object.
      data: the mapping, plain (lists, str keys, Python numbers); ``None`` otherwise.
      config: the given :class:`SweepConfig`; ``None`` otherwise.
    """

    label: str
    folder: str
    path: str | None = None
    data: Any = None
    config: SweepConfig | None = None

    @property
    def commit_path(self) -> str:
        """The path :func:`harness.tracking.provenance.config_commit` reads (a file that is not
        there for a mapping: its folder's commit, ``+untracked``)."""
        return self.path if self.path is not None else os.path.join(self.folder, self.label)

    @property
    def text(self) -> str:
        """The config as YAML text (a file's own bytes; a mapping or an object written out).

        Raises:
          OSError: the file cannot be read (it could a moment ago, when it was validated).
        """
        if self.path is not None:
            return Path(self.path).read_text()
        import yaml

        data = self.data if self.config is None else \
            self.config.model_dump(mode="json", exclude_defaults=True)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _plain(value: Any, where: str, above: tuple[int, ...] = ()) -> Any:
    """``value`` as YAML's plain data: mappings with ``str`` keys, lists, Python scalars.

    Args:
      value: the mapping or one of its values; ``where`` its key path; ``above`` the ids of the
        mappings and lists that hold it (a cycle is one of them again).
    Raises:
      ConfigError: a key that is not a string, a value YAML cannot hold, a mapping or list that
        contains itself, or nesting deeper than the YAML reader's ``MAX_DEPTH`` (``<dict>: PATH: ...``).
    """
    if isinstance(value, Mapping | list | tuple):
        from harness.config.yamlsafe import MAX_DEPTH

        if id(value) in above:
            raise ConfigError([f"{DICT_LABEL}: {where or '<top>'}: contains itself (a cycle); a config "
                               f"is a tree of mappings, lists and values"])
        if len(above) >= MAX_DEPTH:
            raise ConfigError([f"{DICT_LABEL}: {where}: nested more than {MAX_DEPTH} levels deep"])
        above = (*above, id(value))
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError([f"{DICT_LABEL}: {where or '<top>'}: the key {k!r} is not a string"])
            out[k] = _plain(v, f"{where}.{k}" if where else k, above)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]", above) for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    item = getattr(value, "item", None)  # a numpy scalar (np.float32(0.1), np.int64(3))
    if callable(item) and getattr(value, "shape", None) == ():
        return _plain(item(), where, above)
    raise ConfigError([f"{DICT_LABEL}: {where or '<top>'}: {type(value).__name__} is not a value a "
                       f"config holds (numbers, strings, booleans, None, lists and mappings)"])


def given_config(config: Any) -> GivenConfig:
    """``config`` (a path, a mapping, a :class:`SweepConfig` or a :class:`GivenConfig`) as a
    :class:`GivenConfig`; a mapping is made plain here (module docstring).

    Raises:
      TypeError: ``config`` is none of these.
      ConfigError: a mapping holds something YAML cannot.
    """
    if isinstance(config, GivenConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        return GivenConfig(label=path, folder=os.path.dirname(os.path.abspath(path)), path=path)
    if isinstance(config, SweepConfig):
        return GivenConfig(label=OBJECT_LABEL, folder=os.getcwd(), config=config)
    if isinstance(config, Mapping):
        return GivenConfig(label=DICT_LABEL, folder=os.getcwd(), data=_plain(config, ""))
    raise TypeError(f"a sweep config is a YAML file's path, a mapping or a SweepConfig, "
                    f"not {type(config).__name__}")


def load_given(given: GivenConfig, registries: Registries | None = None,
               max_trials: int = limits.DEFAULT_MAX_TRIALS) -> SweepConfig:
    """The validated config of ``given`` (module docstring: how each kind is validated).

    Raises:
      ConfigError: one ``LABEL: KEY.PATH: message`` line per problem (its subclass
        ``EnvSettingError`` for a ``HARNESS_*`` variable the harness cannot use).
    """
    from harness.config.environment import check_environment
    from harness.config.load import config_from_data, load_config

    if given.path is not None:
        return load_config(given.path, registries, max_trials)
    check_environment()
    if given.data is not None:
        from harness.config.yamlsafe import YamlConfigError, load_yaml_text

        try:  # the reader a file goes through: its limits (size, depth) hold for a mapping too
            data = load_yaml_text(given.text, given.label)
        except YamlConfigError as e:
            raise ConfigError(e.lines) from None
        return config_from_data(data, given.label, given.folder, registries, max_trials)
    from harness.config.hparams import canonicalize_numbers
    from harness.config.load import check_plan_size, config_registries, with_config_sources
    from harness.config.validate import validate_names

    cfg = given.config
    assert cfg is not None
    check_plan_size(cfg, given.label, max_trials)
    regs = registries or default_registries()
    unresolved = any(c.source is not None and c.source_ref is None
                     for g in (cfg, *cfg.include) for c in g.optimizers or [])
    regs = with_config_sources(regs, cfg, given.label, given.folder) if unresolved \
        else config_registries(cfg, regs)
    validate_names(cfg, given.label, regs)
    return canonicalize_numbers(cfg, regs)
