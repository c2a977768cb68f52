"""Rollout that is not launch-bound: a static KV cache and one CUDA graph per decode step.

:func:`reference_impl.rlhf.rollout.generate` runs each decode step as Python: a forward pass
of many small kernels (each of the model's layers launches its own), then sampling, then
``finished.all()``, which waits for the GPU. At a small batch the GPU finishes each kernel
before Python has launched the next, so tokens per second is set by the CPU, not the GPU.
Inference engines remove that cost by capturing the decode step ahead of time as CUDA
graphs, one per batch size, and replaying them (vLLM and SGLang do, unless veRL's
``actor_rollout_ref.rollout.enforce_eager`` is set; its default is ``False``:
``verl/workers/config/rollout.py`` (``RolloutConfig``) at 0.9.1). A graph needs three
things, and this module gives them:

* **Fixed addresses.** Every tensor the step reads or writes lives at one address for the
  life of the graph: a ``transformers`` ``StaticCache`` (keys and values preallocated for
  ``prompt_length + max_new_tokens`` positions, written in place), and this object's
  buffers for the last token, its position, the response column and ``finished``.
* **No host sync inside the step.** Sampling is the Gumbel-max trick: the argmax of
  ``logits / T + g``, with ``g = -log(-log(u))`` and ``u`` uniform, is a draw from
  ``softmax(logits / T)`` (Gumbel 1954; used for sampling in Maddison et al. 2014), so it
  needs no ``torch.multinomial``. Top-p filtering (``rollout.top_p_filter``) sorts on the
  GPU. Nothing is read back to Python within the step.
* **``finished`` checked every few steps.** The host reads ``finished.all()`` once per
  ``check_every`` steps; a row that finished earlier keeps writing the pad token with mask 0,
  so the output is the same as checking every step.

On a CPU (or with ``cuda_graph=False``) the same step runs eagerly: that is what the tests
run. Weights may change between calls (the trainer copies new weights in every step), but
only in place, with ``copy_`` or ``load_state_dict``: a graph keeps reading the tensors it
was captured with, and a parameter replaced by a new tensor would be silently ignored.

Output: :func:`rollout.generate`'s dict, plus ``rollout_log_probs`` float32 [b, R], the
log-probability of each sampled token under ``softmax(logits / T)`` before top-p filtering,
as ``response_log_probs`` computes it (0 after EOS): veRL's name for what its rollout
returns with ``calculate_log_probs``. This object serves one shape; an engine that captures
several batch sizes pads a batch up to the nearest one.
"""

from __future__ import annotations

import torch

from reference_impl.rlhf.rollout import top_p_filter


class StaticRollout:
    """Sample ``max_new_tokens`` tokens for each of ``batch`` prompts, replaying one decode step.

    Build one per shape and call :meth:`generate` for each batch of prompts (the graph is
    captured on the first call and replayed afterwards).

    Args:
        model: a ``transformers`` causal LM (``Qwen2ForCausalLM``), on the device to use.
        batch, prompt_length, max_new_tokens: the one shape this object serves.
        eos_token_id, pad_token_id: a response ends at EOS; later columns hold pad.
        temperature: logits are divided by it; must be > 0.
        top_p: nucleus sampling threshold in (0, 1].
        check_every: steps between two reads of ``finished`` by the host; >= 1.
        cuda_graph: capture the decode step as a CUDA graph; default: on a CUDA model.
        generator: a ``torch.Generator`` on the model's device, for reproducible draws.

    Raises:
        ValueError: a bad argument (named, with the value given), or ``cuda_graph=True`` for
            a model that is not on a CUDA device.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        batch: int,
        prompt_length: int,
        max_new_tokens: int,
        eos_token_id: int,
        pad_token_id: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        check_every: int = 8,
        cuda_graph: bool | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        from transformers import StaticCache

        if temperature <= 0:
            raise ValueError(
                f"temperature must be > 0, got {temperature}; use a small top_p for greedy"
            )
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        for name, value in (
            ("batch", batch),
            ("prompt_length", prompt_length),
            ("max_new_tokens", max_new_tokens),
            ("check_every", check_every),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        device = next(model.parameters()).device
        if cuda_graph is None:
            cuda_graph = device.type == "cuda"
        if cuda_graph and device.type != "cuda":
            raise ValueError(
                f"cuda_graph=True needs a model on a CUDA device; this one is on {device}"
            )
        self.model = model
        self.shape = (batch, prompt_length)
        self.max_new_tokens = max_new_tokens
        self.eos_token_id, self.pad_token_id = eos_token_id, pad_token_id
        self.temperature, self.top_p = temperature, top_p
        self.check_every = check_every
        self.cuda_graph = cuda_graph
        self.generator = generator
        # The last position is never fed back, so P + R - 1 would do; P + R is simpler.
        self.cache = StaticCache(config=model.config, max_cache_len=prompt_length + max_new_tokens)
        # The step's state: fixed addresses, changed only in place.
        long = {"dtype": torch.long, "device": device}
        self.token = torch.full((batch, 1), pad_token_id, **long)  # the token to feed next
        self.position = torch.zeros((batch, 1), **long)  # its position
        self.column = torch.zeros(1, **long)  # the response column the next draw goes to
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.responses = torch.full((batch, max_new_tokens), pad_token_id, **long)
        self.response_mask = torch.zeros((batch, max_new_tokens), **long)
        self.log_probs = torch.zeros((batch, max_new_tokens), dtype=torch.float32, device=device)
        self.graph = None

    # --- one step, without a host sync -----------------------------------------

    def _draw(self, logits: torch.Tensor) -> None:
        """Sample from ``logits`` [b, vocab], write the draw into its column, advance."""
        logits = logits.float() / self.temperature
        log_probs = logits.log_softmax(-1)  # before top-p, as response_log_probs computes them
        filtered = top_p_filter(logits, self.top_p)
        u = torch.rand(filtered.shape, device=filtered.device, generator=self.generator)
        gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(u.dtype).tiny)))
        token = (filtered + gumbel).argmax(-1)
        live = ~self.finished
        taken = log_probs.gather(-1, token[:, None]).squeeze(-1)
        token = token.masked_fill(self.finished, self.pad_token_id)
        self.responses.index_copy_(1, self.column, token[:, None])
        self.response_mask.index_copy_(1, self.column, live.long()[:, None])
        self.log_probs.index_copy_(1, self.column, (taken * live)[:, None])
        self.finished |= token == self.eos_token_id
        self.token.copy_(token[:, None])
        self.column.add_(1)

    def _step(self) -> None:
        """Feed the last token (its keys and values go into the cache) and draw the next."""
        out = self.model(
            input_ids=self.token,
            position_ids=self.position,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.position.add_(1)
        self._draw(out.logits[:, -1, :])

    # --- a whole rollout -----------------------------------------------------------

    def _prefill(self, prompts: torch.Tensor) -> None:
        """Reset the state, run the prompts through the model, and draw the first token."""
        batch, prompt_length = self.shape
        self.cache.reset()
        self.finished.zero_()
        self.responses.fill_(self.pad_token_id)
        self.response_mask.zero_()
        self.log_probs.zero_()
        self.column.zero_()
        self.position.fill_(prompt_length)
        positions = torch.arange(prompt_length, device=prompts.device).expand(batch, -1)
        out = self.model(
            input_ids=prompts,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,  # only the last position's logits: [b, 1, vocab], not [b, P, vocab]
        )
        self._draw(out.logits[:, -1, :])

    def _capture(self, prompts: torch.Tensor) -> None:
        """Capture :meth:`_step` as a CUDA graph (PyTorch's recipe: warm up on a side stream)."""
        self._prefill(prompts)  # allocates the cache's tensors, which the graph must reuse
        graph = torch.cuda.CUDAGraph()
        if self.generator is not None:
            graph.register_generator_state(self.generator)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # One step: more would write past the last response column when max_new_tokens
            # is 2 (the prefill drew column 0, this step draws column 1).
            self._step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            self._step()
        self.graph = graph  # the warm-up's and capture's writes are undone by the next prefill

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sample a response for every prompt; the result is :func:`rollout.generate`'s.

        Args:
            prompts: int64 [batch, prompt_length] on the model's device (no padding).

        Returns:
            ``prompts`` [b, P], ``responses`` [b, R], ``input_ids`` / ``attention_mask`` /
            ``position_ids`` [b, P + R], ``response_mask`` [b, R] (int64) and
            ``rollout_log_probs`` float32 [b, R]; new tensors, not this object's buffers.

        Raises:
            ValueError: ``prompts`` is not of the shape this object was built for.
        """
        if tuple(prompts.shape) != self.shape:
            raise ValueError(
                f"prompts have shape {tuple(prompts.shape)}, but this StaticRollout was built "
                f"for {self.shape} (batch, prompt_length); a captured graph serves one shape: "
                "build one StaticRollout per shape"
            )
        if self.cuda_graph and self.graph is None and self.max_new_tokens > 1:
            self._capture(prompts)  # with one new token no step follows the prefill
        self._prefill(prompts)
        for done in range(1, self.max_new_tokens):
            if done % self.check_every == 0 and bool(self.finished.all()):  # the only sync
                break
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        batch, prompt_length = self.shape
        responses, response_mask = self.responses.clone(), self.response_mask.clone()
        input_ids = torch.cat([prompts, responses], dim=1)
        return {
            "prompts": prompts,
            "responses": responses,
            "input_ids": input_ids,
            "attention_mask": torch.cat([torch.ones_like(prompts), response_mask], dim=1),
            "position_ids": torch.arange(input_ids.shape[1], device=prompts.device)
            .expand(batch, -1)
            .clone(),
            "response_mask": response_mask,
            "rollout_log_probs": self.log_probs.clone(),
        }
