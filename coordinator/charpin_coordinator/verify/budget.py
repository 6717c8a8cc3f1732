"""Coordinator side; stdlib and the runner's configuration only. The budget of verify's generated
inputs (#19): `--generate N` and `--generate-seconds S` over `[tool.charpin.verify] generate` and
`generate_seconds` of the base, over the defaults; kept apart so the CLI loads it cheaply."""

from __future__ import annotations

from dataclasses import dataclass

from charpin_runner.config import VerifyConfig

_DEFAULT = VerifyConfig()
# All the patch's functions together, unless one function alone is given more.
TOTAL_SECONDS = 20.0


@dataclass(frozen=True)
class Generate:
    """The budget of generated inputs; the box stops a function at whichever comes first."""

    examples: int = _DEFAULT.generate  # generated inputs per changed public function (0: none)
    seconds: float = _DEFAULT.generate_seconds  # per function (its shrinking on top)
    total_seconds: float = TOTAL_SECONDS  # all the patch's functions together

    @classmethod
    def of(
        cls, config: VerifyConfig, examples: int | None = None, seconds: float | None = None
    ) -> Generate:
        """The command line's values where given, else the configuration's."""
        per = config.generate_seconds if seconds is None else seconds
        return cls(
            examples=config.generate if examples is None else examples,
            seconds=per,
            total_seconds=max(TOTAL_SECONDS, per),
        )
