"""vLLM as the serving backend: each new policy version pushed to vLLM servers (``learner.vllm_urls``)."""
