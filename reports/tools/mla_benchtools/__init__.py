"""Tools over mla-bench output: the report generator and the regression gate."""
