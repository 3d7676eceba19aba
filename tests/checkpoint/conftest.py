"""The target of the refusal tests: a trained model and optimizer a bad checkpoint must not touch."""
import pytest

from minitransformer.optim import Adam
from checkpoint_helpers import make_model, train_steps


@pytest.fixture
def target():
    """A trained DecoderLM + Adam that a bad checkpoint must not touch."""
    model = make_model("DecoderLM", seed=21)
    opt = Adam(model, lr=1e-2)
    train_steps(model, opt, "DecoderLM", n=2)
    return model, opt
