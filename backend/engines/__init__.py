"""What SpecScope reads from serving engines (vLLM, SGLang, TensorRT-LLM, llama.cpp): their speculative-
decoding counters, turned into the same acceptance figures the local engine reports
(`backend.core.metrics.AcceptanceCounter`), one module per engine. Knows nothing about the store, the
worker or the UI; the HTTP side lives with the callers.
"""
