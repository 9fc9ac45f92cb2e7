"""Models: ``models.stax`` (drop-in stax with running-statistics BatchNorm) and the model zoo.

``from models import stax``; ``from models.zoo import MODELS, ModelDef``; ``models.flops.xla_flops``.
Imports only jax and numpy (never the harness or MLflow).
"""

from models import flops, stax, zoo
from models.flops import jaxpr_flops, xla_flops
from models.zoo import MODELS, ModelDef

__all__ = ["MODELS", "ModelDef", "flops", "jaxpr_flops", "stax", "xla_flops", "zoo"]
