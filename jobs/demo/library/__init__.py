"""Templates of the throwaway kernel library ``kernelwatch demo`` creates."""
