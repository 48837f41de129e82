"""Speed levers that never change the maths: the attention kernel (its probe and cache,
FlashAttention-4), regional compile and Dynamo's saved graphs, fused projections, fp8 matmuls,
the denoiser's load beside phases 1-2, CUDA's warm-up, the first step's report."""
