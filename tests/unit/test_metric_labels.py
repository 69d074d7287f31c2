"""Label values stay in bounded sets whatever callers send (servicekit.labels)."""

from __future__ import annotations

import pytest

from servicekit.labels import OTHER, BoundedValues, MetricLabels
from servicekit.settings import Env, SettingsError


def test_the_first_n_distinct_values_keep_their_names_and_the_rest_are_other() -> None:
    bound = BoundedValues(3)
    seen = {bound(f"model-{i}") for i in range(3000)}
    assert seen == {"model-0", "model-1", "model-2", OTHER}
    assert bound("model-1") == "model-1", "a known value keeps its name"


def test_an_allow_list_admits_only_its_globs_still_bounded() -> None:
    bound = BoundedValues(2, ("gpt-*", "claude-3-?-sonnet"))
    assert bound("llama-3") == OTHER
    assert bound("claude-3-5-sonnet") == "claude-3-5-sonnet"
    assert bound("gpt-4o") == "gpt-4o"
    assert bound("gpt-5") == OTHER, "the allow list does not lift the bound"


def test_metric_label_settings_come_from_the_environment() -> None:
    assert MetricLabels.from_env(Env({})) == MetricLabels()
    assert MetricLabels().tenant_labels is False
    labels = MetricLabels.from_env(
        Env(
            {
                "RATION_METRICS_MODELS": " gpt-*, claude-* ,",
                "RATION_METRICS_MAX_MODELS": "7",
                "RATION_METRICS_TENANT_LABELS": "true",
                "RATION_METRICS_MAX_TENANT_VALUES": "3",
                "RATION_METRICS_MAX_POOLS": "4",
            }
        )
    )
    assert labels == MetricLabels(("gpt-*", "claude-*"), 7, True, 3, 4)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RATION_METRICS_MAX_MODELS", "-1"),
        ("RATION_METRICS_TENANT_LABELS", "maybe"),
        ("RATION_METRICS_MAX_POOLS", "0"),
    ],
)
def test_bad_metric_label_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        MetricLabels.from_env(Env({name: value}))
