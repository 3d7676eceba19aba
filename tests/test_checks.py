"""One way to check a setting (``minitransformer.checks``): what passes, and the one line a bad value gets."""
import pytest

from minitransformer import checks


@pytest.mark.parametrize("value", [True, 1.5, "3", None, 2.0])
def test_a_whole_number_is_an_int_and_never_a_bool(value):
    with pytest.raises(ValueError, match=r"^n must be a whole number >= 0, got "):
        checks.whole("n", value, 0)


def test_whole_numbers_within_their_bounds_pass_and_the_message_names_the_bounds():
    assert checks.whole("n", 3, 1, 5) == 3 and checks.whole("n", None, 1, optional=True) is None
    with pytest.raises(ValueError, match="n must be a whole number from 1 to 5, got 7"):
        checks.whole("n", 7, 1, 5)
    with pytest.raises(ValueError, match=r"n must be a whole number >= 1 \(or None\), got 0"):
        checks.whole("n", 0, 1, optional=True)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10 ** 400, True, "1"])
def test_a_real_number_is_finite_and_never_a_bool_or_a_string(value):
    assert not checks.is_finite_number(value)
    with pytest.raises(ValueError, match="must be a finite number"):
        checks.real("recipe.lr", value, 0, low_open=True)


def test_real_bounds_open_and_closed_and_their_words():
    assert checks.real("p", 1.0, 0, 1) == 1.0 and checks.real("p", 0.5, 0, 1, low_open=True, high_open=True) == 0.5
    with pytest.raises(ValueError, match=r"p must be a finite number > 0 and < 1, got 1"):
        checks.real("p", 1, 0, 1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"recipe.lr must be a finite number > 0, got -1"):
        checks.real("recipe.lr", -1, 0, low_open=True)


def test_a_choice_names_every_allowed_value_and_a_long_bad_value_is_shown_short():
    with pytest.raises(ValueError, match=r"form must be one of 'a', 'b', got 'c'"):
        checks.choice("form", "c", ("a", "b"))
    with pytest.raises(ValueError) as err:
        checks.choice("form", "x" * 10_000, ("a",))
    assert len(str(err.value)) < 120
