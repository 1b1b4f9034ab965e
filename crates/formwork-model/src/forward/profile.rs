//! The optional per-op profile of the native forward pass: the ops timed ([`Op`]), their
//! accumulated wall time ([`Profile`]) and the lap timer the layer loop calls (`Clock`).

use std::time::{Duration, Instant};

/// Ops the optional profile times separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Embedding row lookup (dequantization).
    Embed,
    /// RMSNorms fused with activation quantization, and quantizing attention/MLP outputs.
    NormQuant,
    /// The stacked q/k/v matmul (+ biases).
    MatmulQkv,
    /// q/k norms, rotary, KV-cache append.
    RopeCache,
    /// Attention over the cache.
    Attention,
    /// The attention output matmul.
    MatmulO,
    /// The stacked gate/up matmul.
    MatmulGateUp,
    /// SiLU/GELU × up.
    Activation,
    /// The down matmul.
    MatmulDown,
    /// Post-norms and residual adds.
    Residual,
    /// Final norm and the output (logits) matmul.
    Output,
}

impl Op {
    /// All ops in forward order.
    pub const ALL: [Op; 11] = [
        Op::Embed,
        Op::NormQuant,
        Op::MatmulQkv,
        Op::RopeCache,
        Op::Attention,
        Op::MatmulO,
        Op::MatmulGateUp,
        Op::Activation,
        Op::MatmulDown,
        Op::Residual,
        Op::Output,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Op::Embed => "embedding lookup",
            Op::NormQuant => "rmsnorm + quantize",
            Op::MatmulQkv => "matmul q/k/v",
            Op::RopeCache => "q/k norm, rope, kv append",
            Op::Attention => "attention",
            Op::MatmulO => "matmul o",
            Op::MatmulGateUp => "matmul gate/up",
            Op::Activation => "silu/gelu x up",
            Op::MatmulDown => "matmul down",
            Op::Residual => "post-norms, residual",
            Op::Output => "final norm + logits matmul",
        }
    }
}

/// Accumulated wall time per [`Op`] (only when profiling is on).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Time per op, indexed like [`Op::ALL`].
    pub totals: [Duration; 11],
    /// Forward calls timed.
    pub calls: u64,
}

/// Times consecutive ops when enabled; a branch per lap otherwise.
pub(super) struct Clock<'a> {
    pub(super) profile: Option<&'a mut Profile>,
    pub(super) last: Option<Instant>,
}

impl Clock<'_> {
    pub(super) fn lap(&mut self, op: Op) {
        if let Some(p) = self.profile.as_deref_mut() {
            let now = Instant::now();
            if let Some(last) = self.last {
                p.totals[op as usize] += now - last;
            }
            self.last = Some(now);
        }
    }
}
