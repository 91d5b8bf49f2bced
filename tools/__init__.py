"""The build and release tools, run from the repository root as modules
(`python -m tools.wheel`; the Makefile's targets do). tools/checkout.py holds
the checkout's root. The tools that run before TensorFlow's environment or
gobn exist (cuda_fatbin, tfflags, wheel, compat) import neither.
tools/gpucheck/ is the GPU check bundle's programs, which run on their own,
without the repository (make gpu-bundle)."""
