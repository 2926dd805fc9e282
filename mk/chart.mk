# ---- charts (bt_chart.h): the bt_chart tool ----
#   make bt_chart     training logs (log.jsonl) -> one SVG chart (tools/bt_chart.c); tests/test_chart.c
#                     runs it and checks its SVG with tests/chart_check.py (python3's xml.etree)
bt_chart: tools/bt_chart.c bt_chart.h bt_data.h
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
tools: bt_chart
