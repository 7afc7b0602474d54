"""MAD maths as a pure numpy library: taxonomy and distance, selection, ranking, analysis, simulation.

No database and no web imports here; everything else in the service calls this package.
"""
