"""Link rates (rpcscope/units.py): what `testbed up --link-rate`, `whatif --link-rate` and the manifest
share."""
import pytest

from rpcscope.units import UnitError, fmt_rate, parse_rate, parse_sizes


@pytest.mark.parametrize("text, bits", [
    ("10mbit", 10_000_000), ("10Mbit", 10_000_000), ("10m", 10_000_000), ("10 mbit", 10_000_000),
    ("1.5mbit", 1_500_000), ("1gbit", 1_000_000_000), ("100000", 100_000), ("8kbit", 8_000),
    # bps is bytes per second, as tc reads it
    ("125kbps", 1_000_000), ("1mbps", 8_000_000),
    ("100gbit", 100_000_000_000),
])
def test_rates_parse_to_bits_per_second(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", [None, "", "none", "None", "0", "off", "unshaped"])
def test_no_rate_is_an_unshaped_link(text):
    assert parse_rate(text) is None


@pytest.mark.parametrize("text, words", [
    ("fast", "not a rate"), ("10 furlongs", "not a rate"), ("-5mbit", "not a rate"), ("1e9", "not a rate"),
    ("1bit", "out of range"), ("7999", "out of range"), ("101gbit", "out of range"),
])
def test_bad_rates_are_refused_with_what_to_write(text, words):
    with pytest.raises(UnitError, match=words) as e:
        parse_rate(text)
    assert repr(text) in str(e.value) and ("10mbit" in str(e.value) or "8kbit to 100gbit" in str(e.value))


@pytest.mark.parametrize("bits, text", [
    (None, "unshaped"), (0, "unshaped"), (10_000_000, "10mbit"), (1e8, "100mbit"), (1_000_000_000, "1gbit"),
    (1_500_000, "1500kbit"), (8_000, "8kbit"), (1_234_567, "1234567bit"),
])
def test_rates_are_written_in_the_largest_exact_unit(bits, text):
    assert fmt_rate(bits) == text


@pytest.mark.parametrize("bits", [8_000, 1_500_000, 10_000_000, 1_234_567, 2_500_000_000, 100_000_000_000, None])
def test_a_written_rate_reads_back_to_the_same_value(bits):
    assert parse_rate(fmt_rate(bits)) == bits


@pytest.mark.parametrize("text, sizes", [
    ("0,1392,4016", [0, 1392, 4016]), (" 0 , 8032 ", [0, 8032]), ("0,4016,", [0, 4016]), ("1048576", [1 << 20]),
])
def test_sizes_parse_to_byte_counts(text, sizes):
    assert parse_sizes(text) == sizes


def test_no_sizes_only_where_allowed():
    assert parse_sizes("", "--holdout", allow_empty=True) == [] and parse_sizes(None, "--fit", allow_empty=True) == []
    with pytest.raises(UnitError, match="--sizes '': give one or more byte counts"):
        parse_sizes("")


@pytest.mark.parametrize("text, words", [
    ("a,b", "give byte counts separated by commas"), ("1.5", "give byte counts separated by commas"),
    ("-1,0", "from 0 to 1048576"), ("1048577", "from 0 to 1048576"), ("0,4016,0", "a size is repeated"),
])
def test_bad_sizes_are_refused_naming_the_option(text, words):
    with pytest.raises(UnitError, match=words) as e:
        parse_sizes(text, "--predict")
    assert str(e.value).startswith(f"--predict {text!r}: ")
