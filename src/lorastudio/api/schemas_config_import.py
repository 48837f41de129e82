"""Request and response models of POST /api/config/import (lorastudio/config_import: another
trainer's config as Train form settings, with a report of every one of its settings)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lorastudio.config_import.reading import MAX_BYTES


class ConfigImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=255,
        description="the file's name: its suffix (.yaml, .yml, .toml, .json) picks the parser",
    )
    text: str = Field(max_length=MAX_BYTES, description="the file's text (UTF-8)")
    trainer: Literal["ai-toolkit", "kohya", "simpletuner", "onetrainer"] | None = Field(
        default=None, description="the trainer that wrote it (null: detected from its keys)"
    )
    family: str | None = Field(
        default=None, max_length=100, description="the family to train (null: the file's)"
    )
    base_model: str | None = Field(
        default=None, max_length=4096, description="the base model to train (null: the file's)"
    )


class ImportLineOut(BaseModel):
    model_config = ConfigDict(extra="ignore")

    peer: str = Field(description="the setting's key in the file (dotted, list items as [i])")
    outcome: Literal["carried", "changed", "not carried"]
    ours: str | None = Field(description="the lorastudio setting it became (null: not carried)")
    value: Any = Field(description="the value written")
    note: str = Field(description="how its meaning changed, or why it was not carried")


class ConfigImportOut(BaseModel):
    model_config = ConfigDict(extra="ignore")

    trainer: str = Field(description="the trainer the file was read as")
    config: dict[str, Any] = Field(
        description="the settings (a TrainConfig's, which the strict config accepts; without a dataset"
        " when the file names none this import could carry)"
    )
    report: list[ImportLineOut] = Field(description="one line or more per setting of the file, in its order")
    toml: str = Field(description="the settings as a run config TOML (`lorastudio train FILE`)")
