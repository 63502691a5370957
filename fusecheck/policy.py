"""The numerical policy: per-dtype tolerances and the verdict's ratio thresholds, in one place.

Everything that decides PASS or FAIL reads its numbers from a `Policy`. Defaults follow the project brief
(fp32 1e-5, fp16 1e-3, bf16 5e-3, ints and bools exact) and msprobe's benchmark standard for the ratios.
A user may override any number from a policy file or `[tool.fusecheck]` in pyproject.toml, but an
override that *loosens* a default must carry a `reason`; every override is kept as a `Relaxation` (or a
tightening) that the report prints. Nothing is relaxed silently.
"""
from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from fusecheck import dtypes
from fusecheck.errors import PolicyError  # noqa: F401


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    @property
    def exact(self) -> bool:
        return self.rtol == 0 and self.atol == 0

    def at_scale(self, scale: float) -> "Tolerance":
        """atol for a tensor whose largest magnitude is `scale`: unchanged at or above 1, shrunk with it below.

        atol exists for elements near zero in a tensor whose values reach 1. Taken literally on a tensor of
        small values (bf16 gradients around 1e-4) it would pass any error, even a factor of two, so below
        unit scale it is scaled down with the tensor: the verdict does not change when such a tensor is
        multiplied by a power of two; a tensor that eager and the golden both hold at exactly 0 gets atol 0.
        This only ever tightens.
        """
        return self if scale >= 1 or self.exact else Tolerance(self.rtol, self.atol * max(scale, 0.0))


# dtype name -> tolerance. Integers and bools are exact and are not overridable to inexact.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-7, 1e-7),
    "float32": Tolerance(1e-5, 1e-5),
    "float16": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(5e-3, 5e-3),
}

# "Small values" are judged by absolute error (msprobe): |golden| below this threshold.
DEFAULT_SMALL_VALUE: dict[str, float] = {
    "float64": 2.0**-20,
    "float32": 2.0**-20,
    "float16": 2.0**-10,
    "bfloat16": 2.0**-10,
}


def _number(value, key: str, source: str) -> float:
    """A policy number: an int or a float, never a bool (TOML's `true` would read as 1.0) or a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(f"{source}: {key} = {value!r} is not a number")
    return float(value)


@dataclass(frozen=True)
class Ratios:
    """How much worse than eager (both measured against the golden) compiled may be.

    Defaults are msprobe's benchmark standard: MaxRel 10, MeanRel 2, RMSE 2, small-value error 2.
    Tensors with fewer than `small_tensor_numel` elements use `small_tensor_rmse` instead of `rmse`, as
    torch's `same(fp64_ref)` does (multiplier 3 below 1000 elements): an RMSE over a handful of elements
    (a bias gradient, say) is too noisy an estimate for a factor of 2 to mean anything.
    """

    rmse: float = 2.0
    small_tensor_rmse: float = 3.0
    small_tensor_numel: float = 1000
    mean_rel: float = 2.0
    max_rel: float = 10.0
    small_value: float = 2.0
    small_value_max_abs: float = 10.0  # largest error on a small value, vs eager's (floor: atol)
    # elements that lost most of their bits (fp32/fp64: RE >= 1e-3, small values included), vs eager's count;
    # significance-tested as the small-value count (small_value_alpha)
    digits_lost: float = 2.0
    # significance level of the test that compiled's small-value error count exceeds the bound beyond chance
    small_value_alpha: float = 0.01
    # significance level of the test that compiled's mean relative error exceeds its bound beyond the
    # element-to-element spread of the relative errors (one near-zero element can dominate a small mean)
    mean_rel_alpha: float = 0.01
    # significance level of MaxRel's chance limit per octave of |golden| (compare/octaves.py): compiled's
    # largest relative error in an octave of n elements must exceed what the ratio of two correct runs'
    # maxima reaches with this probability. Small because a grid of real models tests ~1e5 octaves, and
    # one element alone in its octave (a cancellation) is one noise draw against another
    max_rel_alpha: float = 1e-5
    # compiled's systematic scale against the golden (the least-squares slope of its error on the golden: a wrong
    # epsilon, a scale factor, a truncating cast) vs eager's (floor: rtol / 10), significance-tested against the
    # spread independent element errors give it (scale_alpha)
    scale: float = 2.0
    scale_alpha: float = 0.01
    # compiled's constant offset against the golden (its mean error over rms(golden): a bias added twice, a shifted
    # zero point) vs eager's, the same way (floor rtol / 10, offset_alpha)
    offset: float = 2.0
    offset_alpha: float = 0.01
    # report only: a PASS by tolerance whose compiled RMSE (against the golden) exceeds this many times
    # eager's says so in its message; eager's RMSE ratio to itself is 1, and 1.5 flags what is worth reading
    note_rmse: float = 1.5
    # a discrete decision (topk routing, sort, argmax, a relu's mask, a max-pool's argmax) that a run takes
    # differently from the golden is a near-tie, and the golden the run is judged against takes the run's
    # choice there, when the golden's values of the two choices differ by at most this many times eager's
    # error at the decision's input (twice that where two values swap; fusecheck/golden/choices/); 0 never
    # follows. The same factor as `rmse`: compiled's input may be that much noisier than eager's
    decision_tie: float = 2.0


@dataclass(frozen=True)
class Relaxation:
    """One override of a default, with the user's reason. `loosens` is True when it admits more error."""

    key: str
    default: Any
    value: Any
    reason: str
    loosens: bool

    def describe(self) -> str:
        word = "RELAXED" if self.loosens else "tightened"
        return f"{word} {self.key}: {self.default} -> {self.value} ({self.reason or 'no reason given'})"


@dataclass(frozen=True)
class Policy:
    tolerances: Mapping[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    small_value: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SMALL_VALUE))
    ratios: Ratios = field(default_factory=Ratios)
    relaxations: tuple[Relaxation, ...] = ()
    source: str = "built-in defaults"

    # ---- lookups -------------------------------------------------------------------------------
    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        """Tolerance for comparing two tensors of `dtype`; exact for integers and bools."""
        if not dtype.is_floating_point and not dtype.is_complex:
            return Tolerance(0.0, 0.0)
        name = _COMPLEX_PARTS.get(dtype_name(dtype), dtype_name(dtype))
        if name not in self.tolerances:  # fp8 and friends: the loosest floating default, stated in report
            return max(self.tolerances.values(), key=lambda t: t.rtol)
        return self.tolerances[name]

    def small_value_threshold(self, dtype: torch.dtype) -> float:
        return self.small_value.get(dtype_name(dtype), max(self.small_value.values()))

    # ---- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tolerances": {k: dataclasses.asdict(v) for k, v in self.tolerances.items()},
            "integers_and_bools": "exact",
            "small_value": dict(self.small_value),
            "ratios": dataclasses.asdict(self.ratios),
            "relaxations": [dataclasses.asdict(r) for r in self.relaxations],
        }

    # ---- loading -------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str) -> "Policy":
        """Build a policy from `{tolerance: {dtype: {rtol, atol, reason}}, ratios: {..., reason}}`."""
        try:
            return cls._from_mapping(data, source)
        except PolicyError:
            raise
        except (ValueError, TypeError, AttributeError) as exc:  # `bf16 = 0.1`, `rtol = "abc"`: say where
            raise PolicyError(f"{source}: malformed policy ({type(exc).__name__}: {exc}); expected "
                              "[tolerance.<dtype>] rtol/atol/reason, [ratios] <name> = number, reason") from exc

    @classmethod
    def _from_mapping(cls, data: Mapping[str, Any], source: str) -> "Policy":
        if not isinstance(data, Mapping):
            raise PolicyError(f"{source}: a policy is a table/object, not {type(data).__name__}")
        unknown = set(data) - {"tolerance", "ratios", "small_value"}
        if unknown:
            raise PolicyError(f"{source}: unknown policy keys {sorted(unknown)}; known: tolerance, ratios, small_value")
        tolerances = dict(DEFAULT_TOLERANCES)
        small_value = dict(DEFAULT_SMALL_VALUE)
        ratios = dataclasses.asdict(Ratios())
        relaxations: list[Relaxation] = []

        tolerance = data.get("tolerance") or {}
        if not isinstance(tolerance, Mapping):
            raise PolicyError(f"{source}: [tolerance] is a table of dtypes ([tolerance.bf16] rtol/atol/reason), "
                              f"not {type(tolerance).__name__}")
        for given, entry in tolerance.items():
            dtype = canonical_dtype_name(given, source)
            if isinstance(entry, Mapping) and set(entry) - TOLERANCE_KEYS:
                raise PolicyError(f"{source}: unknown key(s) {sorted(set(entry) - TOLERANCE_KEYS)} in "
                                  f"[tolerance.{given}]; known: {', '.join(sorted(TOLERANCE_KEYS))}")
            base = tolerances.get(dtype, Tolerance(0.0, 0.0))
            reason = str(entry.get("reason", ""))
            new = Tolerance(_number(entry.get("rtol", base.rtol), f"tolerance.{given}.rtol", source),
                            _number(entry.get("atol", base.atol), f"tolerance.{given}.atol", source))
            for attr in ("rtol", "atol"):
                old, val = getattr(base, attr), getattr(new, attr)
                if val != old:
                    relaxations.append(_relaxation(f"tolerance.{dtype}.{attr}", old, val, reason, val > old, source))
            tolerances[dtype] = new

        ratio_entry = dict(data.get("ratios") or {})
        reason = str(ratio_entry.pop("reason", ""))
        for key, val in ratio_entry.items():
            if key not in ratios:
                raise PolicyError(f"{source}: unknown key {key!r} in [ratios]; known: reason, "
                                  f"{', '.join(sorted(ratios))}")
            old, val = ratios[key], _number(val, f"ratios.{key}", source)
            if val != old:
                loosens = val < old if key in LOOSER_WHEN_SMALLER else val > old
                relaxations.append(_relaxation(f"ratios.{key}", old, val, reason, loosens, source))
            ratios[key] = val

        sv_entry = dict(data.get("small_value") or {})
        reason = str(sv_entry.pop("reason", ""))
        for dtype, val in sv_entry.items():
            dtype = canonical_dtype_name(dtype, source)
            old, val = small_value.get(dtype, 0.0), _number(val, f"small_value.{dtype}", source)
            if val != old:
                # A larger small-value threshold judges more elements by absolute error only: looser.
                relaxations.append(_relaxation(f"small_value.{dtype}", old, val, reason, val > old, source))
            small_value[dtype] = val

        for key in LOOSER_WHEN_SMALLER:
            if not 0 < ratios[key] < 1:
                raise PolicyError(f"{source}: ratios.{key} = {ratios[key]} is a significance level: "
                                  "it must lie strictly between 0 and 1")
        return cls(tolerances, small_value, Ratios(**ratios), tuple(relaxations), source)

    @classmethod
    def load(cls, path: str | Path | None = None, search_from: str | Path = ".") -> "Policy":
        """Load a policy file (TOML or JSON) or, with no path, `[tool.fusecheck]` from the nearest pyproject.toml."""
        if path is not None:
            path = Path(path)
            if path.is_dir():
                raise PolicyError(f"--policy {path}: is a directory; name a policy file (TOML or JSON)")
            if not path.is_file():
                raise PolicyError(f"policy file not found: {path}")
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise PolicyError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); a policy file is "
                                  "TOML or JSON in UTF-8") from exc
            except OSError as exc:
                raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror or exc})") from exc
            try:
                data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
            except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
                raise PolicyError(f"{path}: cannot parse policy: {exc}") from exc
            data = data.get("tool", {}).get("fusecheck", data) if path.name == "pyproject.toml" else data
            return cls.from_mapping(data, str(path))
        for folder in [Path(search_from).resolve(), *Path(search_from).resolve().parents]:
            candidate = folder / "pyproject.toml"
            if candidate.is_file():
                try:
                    data = tomllib.loads(candidate.read_text(encoding="utf-8")).get("tool", {}).get("fusecheck")
                except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                    raise PolicyError(f"{candidate}: cannot parse it for [tool.fusecheck]: {exc}") from exc
                except OSError as exc:
                    raise PolicyError(f"{candidate}: cannot read it ({exc.strerror or exc})") from exc
                if data:
                    return cls.from_mapping(data, f"{candidate} [tool.fusecheck]")
                break
        return cls()


# The keys of one [tolerance.<dtype>] table; anything else (a typo: `rtoll`) is refused, never ignored.
TOLERANCE_KEYS = frozenset({"rtol", "atol", "reason"})

# For these ratio keys a smaller value admits more error (a significance level: smaller = harder to fail).
LOOSER_WHEN_SMALLER = {"small_value_alpha", "mean_rel_alpha", "max_rel_alpha", "scale_alpha", "offset_alpha"}

_COMPLEX_PARTS = {"complex64": "float32", "complex128": "float64", "complex32": "float16"}


def _relaxation(key: str, old: Any, new: Any, reason: str, loosens: bool, source: str) -> Relaxation:
    if not (isinstance(new, (int, float)) and math.isfinite(new) and new >= 0):
        raise PolicyError(f"{source}: {key} = {new!r} is not a finite number >= 0")
    if loosens and not reason.strip():
        raise PolicyError(f"{source}: {key} loosened from {old} to {new} without a 'reason'; "
                          "every relaxation must say why")
    return Relaxation(key, old, new, reason, loosens)


def canonical_dtype_name(name: str, source: str = "policy") -> str:
    name = dtypes.long_name(name) or name
    if name not in DEFAULT_TOLERANCES:
        raise PolicyError(f"{source}: unknown floating dtype {name!r}; known: {sorted(DEFAULT_TOLERANCES)}")
    return name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
