"""Views of results: charts and the markdown report of recorded runs."""
