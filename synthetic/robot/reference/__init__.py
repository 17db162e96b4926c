"""``concept-benchmark`` 0.4.1's robots, reproduced (``data.render=reference``).

- :mod:`~synthetic.robot.reference.geometry`: its drawing code as paths (fixed pose, ``r = size/12``,
  knee and elbow dots on every robot below 120 px, twin feet);
- :mod:`~synthetic.robot.reference.raster`: cairo-like anti-aliased coverage;
- :mod:`~synthetic.robot.reference.draw`: the vectorised renderer (:func:`render`);
- :mod:`~synthetic.robot.reference.schemes`: its 71 two-colour schemes.
"""

from synthetic.robot.reference.draw import N_SCHEMES, render

__all__ = ["N_SCHEMES", "render"]
