"""The types the SDK's tests declare their tools with: an enum of strings, and a dataclass
with a required field of that enum and a field with a default."""

import dataclasses
import enum


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


@dataclasses.dataclass
class Box:
    size: Size
    label: str = "box"
