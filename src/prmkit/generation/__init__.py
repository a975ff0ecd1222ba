"""prmkit.generation: sample step-by-step solutions from a language model.

    from prmkit.generation import get_sampler, SampleRequest, Prompt, SamplingParams
    with get_sampler("hf", "path/to/model") as sampler:
        outs = sampler.generate([SampleRequest("p0", Prompt(text="..."), n=4, seed=0)],
                                SamplingParams(temperature=0.7, max_tokens=256))

Importing this package loads neither torch nor vllm; a backend's dependencies are
imported when `get_sampler` builds it.
"""

from prmkit.generation.base import (
    BACKENDS,
    Completion,
    Prompt,
    RequestOutput,
    Sampler,
    SampleRequest,
    SamplingParams,
    StreamingSampler,
    get_sampler,
    sample_seed,
)

__all__ = ["BACKENDS", "Completion", "Prompt", "RequestOutput", "Sampler", "SampleRequest",
           "SamplingParams", "StreamingSampler", "get_sampler", "sample_seed"]
