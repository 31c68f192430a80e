"""Views of a run: the live terminal view, the HTML report. They only read the record and the logs."""
