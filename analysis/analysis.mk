# The analysis's native trace extractor (analysis/, issue 5): C over libbabeltrace2.
#
#   make analysis      build/analysis/ctfcols (rpcscope.analysis.traceread uses it when present)

ANALYSIS_OUT := build/analysis
ANALYSIS_CFLAGS := -O2 -g -Wall -Wextra -Werror -std=gnu11

.PHONY: analysis
all: analysis
analysis: $(ANALYSIS_OUT)/ctfcols

$(ANALYSIS_OUT)/ctfcols: analysis/ctfcols.c
	@mkdir -p $(@D)
	$(CC) $(ANALYSIS_CFLAGS) -o $@ $< -lbabeltrace2
