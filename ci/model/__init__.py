"""The model of matrix.yaml, the first layer of ci/ (it imports no other): read and validate the
file (load, schema), expand a profile into cells (expand) and key a stage's result (keys).

The names the other layers use, in one place: `from ci import model as mx`.
"""
from ci.model.errors import MatrixError
from ci.model.expand import check_profile, expand, holds, parse_filters
from ci.model.keys import builds_cuda, cell_slug, key_hash, key_text, stage_key
from ci.model.load import from_bytes, load, parse
from ci.model.matrix import MATRIX, REPO, Cell, Excluded, Matrix
from ci.model.schema import Profile, Rule, Stage
from ci.model.values import AXES, Condition, parse_pin, parse_version, version_key
from ci.model.yaml_input import MAX_BYTES, MAX_DEPTH, decode, read_yaml

__all__ = ["AXES", "MATRIX", "MAX_BYTES", "MAX_DEPTH", "REPO", "Cell", "Condition", "Excluded",
           "Matrix", "MatrixError", "Profile", "Rule", "Stage", "builds_cuda", "cell_slug",
           "check_profile", "decode", "expand", "from_bytes", "holds", "key_hash", "key_text",
           "load", "parse", "parse_filters", "parse_pin", "parse_version", "read_yaml",
           "stage_key", "version_key"]
