# The analysis's native trace extractor (analysis/): rpcscope's own CTF reader (ctfread),
# libbabeltrace2 for what it refuses.
#
#   make analysis      build/analysis/ctfcols (rpcscope.analysis.traceread uses it when present)

ANALYSIS_OUT := build/analysis
ANALYSIS_CFLAGS := -O2 -g -Wall -Wextra -Werror -std=gnu11

.PHONY: analysis
all: analysis
analysis: $(ANALYSIS_OUT)/ctfcols

$(ANALYSIS_OUT)/ctfcols: analysis/ctfcols.c analysis/ctfread.c analysis/ctfread.h $(GEN)/rpcscope_kernel.h
	@mkdir -p $(@D)
	$(CC) $(ANALYSIS_CFLAGS) -I$(GEN) -o $@ analysis/ctfcols.c analysis/ctfread.c -lbabeltrace2
