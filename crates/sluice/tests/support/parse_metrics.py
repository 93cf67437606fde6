#!/usr/bin/python3
"""Parses a metrics exposition from stdin with the Prometheus client's own
parsers (OpenMetrics, and the classic text format), and prints every sample
as JSON: [{"name": ..., "labels": {...}, "value": ...}, ...].

Exits non-zero if either parser rejects the text."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as classic

text = sys.stdin.read()
samples = []
for family in openmetrics(text):
    for s in family.samples:
        samples.append({"name": s.name, "labels": s.labels, "value": s.value})
# The classic parser must accept it too (it ignores the `# EOF` line).
classic_count = sum(len(f.samples) for f in classic(text))
if classic_count != len(samples):
    sys.exit(f"classic parser saw {classic_count} samples, OpenMetrics {len(samples)}")
json.dump(samples, sys.stdout)
