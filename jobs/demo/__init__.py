"""``kernelwatch demo``: a throwaway kernel library with history, run through the pipeline."""
