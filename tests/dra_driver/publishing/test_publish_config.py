"""An admin's publish configuration: what it may say, and errors that name the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.publishing.publish_config import ConfigError, PublishConfig, load_publish_config, parse_fractions


def test_a_file_in_camel_case_is_read_and_fractions_are_kept_sorted_once(tmp_path: Path) -> None:
    path = tmp_path / "publish.yaml"
    path.write_text("fractions: [8, 2, 8]\nshareGpus: [1]\nmigOrFractions: true\n")
    config = load_publish_config(path)
    assert config.fractions == (2, 8) and config.mig_or_fractions
    assert config.shares(1) and not config.shares(0)
    assert PublishConfig(share_gpus="all").shares(7)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("fractions: [5]\n", "fractions: Value error, fraction 1/5 is not one of"),
        ("shareDefaultCompute: 0\n", "shareDefaultCompute: Input should be greater than or equal to 1"),
        ("migs: true\n", "migs: Extra inputs are not permitted"),
        ("fractions: [2\n", "publish.yaml: while parsing"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_the_field(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "publish.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_publish_config(path)
    assert str(error.value).startswith(str(path)) and named in str(error.value)


def test_fractions_from_a_flag() -> None:
    assert parse_fractions("2,4,8") == (2, 4, 8)
    assert parse_fractions(" None ") == () and parse_fractions("") == ()
    with pytest.raises(ConfigError, match="--fractions 'half'"):
        parse_fractions("half")
