"""Example models for a config's ``source:`` (docs/your-optimizer.md, "Your model")."""

from models import stax


def tiny_mlp(*, num_classes, width: int = 32):
    """Flatten, Dense(width), Relu, Dense(num_classes): a stax pair (a classification model)."""
    return stax.serial(stax.Flatten, stax.Dense(width), stax.Relu, stax.Dense(num_classes))


def flax_mlp(*, num_classes, width: int = 32):
    """The same network as a flax.linen Module."""
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(width)(x.reshape(x.shape[0], -1)))
            return nn.Dense(num_classes)(x)

    return MLP()
