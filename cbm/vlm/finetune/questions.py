"""The questions a counterfactual pair asks: one per robot part, and the Sudoku question kinds (plain
data, which the settings check names against and the builders ask)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RobotQuestion:
    """A question about one part; ``answers[v]`` is the answer when the part's group / value is ``v``;
    ``target[v]`` the editor target that flips it."""

    question: str
    answers: tuple[str, str]
    grouped: int = 0  # sub-type attributes: size of a group (value // grouped gives the answer index)
    part: str | None = None  # the edited part when the key is not a part name (counts)


#: part -> its question (attribute in ``cbm.vlm.editors.synthetic.ROBOT_PARTS``).
ROBOT_QUESTIONS: dict[str, RobotQuestion] = {
    "knees": RobotQuestion("Does this robot have knees? Answer yes or no.", ("no", "yes")),
    "elbows": RobotQuestion("Does this robot have elbows? Answer yes or no.", ("no", "yes")),
    "antennae": RobotQuestion("Does this robot have antennae? Answer yes or no.", ("no", "yes")),
    "mouth": RobotQuestion("Is the robot's mouth open or closed?", ("open", "closed")),
    "head": RobotQuestion("Is the robot's head square or round?", ("square", "round")),
    "body": RobotQuestion("Is the robot's body square or round?", ("square", "round")),
    "ears": RobotQuestion("Are the robot's ears square or triangular?", ("square", "triangular")),
    "feet": RobotQuestion("What shape are the robot's feet, flat or pointy?", ("flat", "pointy"), grouped=5),
    "hands": RobotQuestion("What shape are the robot's hands, round or edgy?", ("round", "edgy"), grouped=3),
    "antennae_count": RobotQuestion("How many antennae does this robot have? Answer with a number.", ("0", "2"), part="antennae"),
    "elbows_count": RobotQuestion("How many elbow joints does this robot have? Answer with a number.", ("0", "2"), part="elbows"),
    "knees_count": RobotQuestion("How many knees does this robot have? Answer with a number.", ("0", "2"), part="knees"),
}
#: Sudoku question kinds: the digit of the edited cell, or the validity of its row.
SUDOKU_QUESTIONS = ("digit", "row_valid")
