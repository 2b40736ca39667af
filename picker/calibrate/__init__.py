"""``specpick calibrate``: time forwards (and the reference loop) on this machine and fit the load
curve's engine constants to them (``policies.calibration``).

:mod:`picker.calibrate.timing` times one forward per (batch, new tokens per sequence, context);
:mod:`picker.calibrate.loop` times the reference loop's own host work from ``serve()``;
:mod:`picker.calibrate.run` runs the grid, fits and builds the calibration file.
"""
