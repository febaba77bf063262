"""The generic exact path: J_tt of any causal LM's decoder layer, through transformers' own code.

A token's block Jacobian J_tt = ∂h_{l+1,t}/∂h_{l,t} holds every earlier position fixed. The
model's own incremental decoding (what `generate()` runs) already separates the two: at
step t, layer l is called on token t alone, and everything the earlier tokens left behind
sits in the cache. `decode.LayerJacobians` runs that decoding and, at layer l, differentiates
the layer's own call with respect to its hidden-state input while a copy of the cache holds
the prefix fixed. Nothing of the layer is rewritten; tdos only plugs into transformers'
extension points:

- `attention.py`: an attention function registered with `AttentionInterface`. It attends to
  the fixed prefix keys/values without concatenating them to the new token's (a concatenation
  would be copied once per cotangent of the batched backward).
- `prefix.py`: a `Cache` subclass over the model's cache: prefix keys/values are read only,
  convolution/recurrent states are copied on first use; the layer's module-held states
  (RecurrentGemma) are restored after the call.
- `ssm.py`: transformers marks the Mamba-style decode op `selective_state_update` as a
  replaceable kernel; tdos keeps transformers' implementation for the values and gives
  autograd a structured derivative, and reads Δ_t from its arguments.
- `sweep/plan/layers.py`: the decoder layers of a model and the kind of each (attention,
  mamba, mamba2, recurrent, conv, … with or without MoE).

A worker holds one decoder layer at a time (`local.py`): the model's skeleton on meta and
its tensors read by name through the checkpoint's reader (`weights.py`, sweep/checkpoints/),
stand-ins for the layers before it (`standin.py`), a weight variant's tensors made by its
kind's maker (sweep/checkpoints/makers.py).
"""
