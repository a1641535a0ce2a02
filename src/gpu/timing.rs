//! GPU time of dispatches, measured with timestamp queries (never with a host clock around
//! a lazy call: `../shared/DESIGN.md`, "Measuring").
//!
//! Each timed dispatch gets its own compute pass whose `timestamp_writes` write a begin and an
//! end timestamp into a [`wgpu::QuerySet`]; the set is resolved into a buffer, read back, and
//! the tick differences are scaled by [`wgpu::Queue::get_timestamp_period`].
//!
//! **Overlap.** On Vulkan, wgpu writes both pass timestamps at `BOTTOM_OF_PIPE`: the begin
//! timestamp waits for earlier work, but nothing stops the pass's dispatch from starting before
//! it is written when the dispatch shares no buffer with its predecessor (no barrier between
//! them). Back-to-back timing ([`GpuTimer::time`]) can therefore read a little *short*;
//! [`GpuTimer::time_isolated`] submits every dispatch on its own and waits for it, so no two
//! timed dispatches can overlap. Benchmarks use the isolated form.
//!
//! A device without `TIMESTAMP_QUERY` enabled is an error ([`Error::Gpu`]), never a panic.

use super::{DispatchPlan, encode_plan_with, gpu_of, readback, submit_blocking};
use crate::context::{Context, KernelPath};
use crate::error::{Error, Result};

const DURING: &str = "GPU timing";

fn err(message: impl Into<String>) -> Error {
    Error::Gpu {
        during: DURING,
        message: message.into(),
    }
}

/// Checks that `ctx` has a GPU with `TIMESTAMP_QUERY` enabled and a usable timestamp period;
/// returns the period in nanoseconds per tick.
pub fn timestamp_period_ns(ctx: &Context) -> Result<f64> {
    let gpu = gpu_of(ctx, DURING)?;
    if !gpu.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
        return Err(err(format!(
            "TIMESTAMP_QUERY is not enabled on this device ({})",
            gpu.info.name
        )));
    }
    let period = f64::from(gpu.queue.get_timestamp_period());
    if !(period.is_finite() && period > 0.0) {
        return Err(err(format!(
            "the queue reports timestamp period {period} ns per tick"
        )));
    }
    Ok(period)
}

/// One dispatch to time: a plan, the path it runs on and its storage buffers (bindings 1..).
#[derive(Clone, Copy, Debug)]
pub struct TimedDispatch<'a> {
    /// The path (a GPU path).
    pub path: KernelPath,
    /// The plan.
    pub plan: &'a DispatchPlan,
    /// Storage buffers bound as bindings 1.. in order.
    pub storage: &'a [&'a wgpu::Buffer],
}

/// Records `plan` like [`super::encode_plan`], in a compute pass that writes timestamps
/// `begin` and `end` of `query_set`. A plan of zero workgroups is an error (no pass would be
/// recorded and the timestamps would never be written).
#[allow(clippy::too_many_arguments)]
pub fn encode_plan_timed(
    ctx: &Context,
    encoder: &mut wgpu::CommandEncoder,
    path: KernelPath,
    plan: &DispatchPlan,
    storage: &[&wgpu::Buffer],
    query_set: &wgpu::QuerySet,
    begin: u32,
    end: u32,
) -> Result<()> {
    if plan.workgroups == 0 {
        return Err(Error::Config(format!(
            "cannot time a dispatch of `{}` with zero workgroups",
            plan.kernel.name
        )));
    }
    let storage: Vec<super::Bind<'_>> = storage.iter().map(|b| super::Bind::from(*b)).collect();
    encode_plan_with(
        ctx,
        encoder,
        path,
        plan,
        &storage,
        Some(wgpu::ComputePassTimestampWrites {
            query_set,
            beginning_of_pass_write_index: Some(begin),
            end_of_pass_write_index: Some(end),
        }),
    )
}

/// Times up to [`GpuTimer::capacity`] dispatches per call; returns nanoseconds per dispatch.
#[derive(Debug)]
pub struct GpuTimer {
    ctx: Context,
    query_set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    capacity: u32,
    period_ns: f64,
}

impl GpuTimer {
    /// A timer for up to `capacity` dispatches per call (1..=2048: two timestamps each, and a
    /// query set holds at most [`wgpu::QUERY_SET_MAX_QUERIES`]). Errors when the device lacks
    /// `TIMESTAMP_QUERY`.
    pub fn new(ctx: &Context, capacity: usize) -> Result<Self> {
        let period_ns = timestamp_period_ns(ctx)?;
        let max = (wgpu::QUERY_SET_MAX_QUERIES / 2) as usize;
        if capacity == 0 || capacity > max {
            return Err(Error::Limit {
                what: "timed dispatches per GpuTimer",
                needed: capacity as u64,
                limit: max as u64,
            });
        }
        let capacity = capacity as u32;
        let gpu = gpu_of(ctx, DURING)?;
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let query_set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("kvpack timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * capacity,
        });
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kvpack timestamps resolve"),
            size: u64::from(2 * capacity) * u64::from(wgpu::QUERY_SIZE),
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(err(e.to_string()));
        }
        Ok(Self {
            ctx: ctx.clone(),
            query_set,
            resolve,
            capacity,
            period_ns,
        })
    }

    /// Dispatches one call can time.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Nanoseconds per timestamp tick.
    pub fn period_ns(&self) -> f64 {
        self.period_ns
    }

    fn check_len(&self, n: usize) -> Result<()> {
        if n > self.capacity as usize {
            return Err(Error::Limit {
                what: "timed dispatches in one call",
                needed: n as u64,
                limit: u64::from(self.capacity),
            });
        }
        Ok(())
    }

    /// Records every dispatch in its own timed pass of one command buffer, back to back, and
    /// returns each one's GPU time in ns. Dispatches that share no buffer may overlap (see the
    /// module docs); prefer [`GpuTimer::time_isolated`] for measurements.
    pub fn time(&self, dispatches: &[TimedDispatch<'_>]) -> Result<Vec<f64>> {
        self.check_len(dispatches.len())?;
        if dispatches.is_empty() {
            return Ok(Vec::new());
        }
        submit_blocking(&self.ctx, DURING, |enc| {
            for (i, d) in dispatches.iter().enumerate() {
                let q = 2 * i as u32;
                encode_plan_timed(
                    &self.ctx,
                    enc,
                    d.path,
                    d.plan,
                    d.storage,
                    &self.query_set,
                    q,
                    q + 1,
                )?;
            }
            Ok(())
        })?;
        self.read(dispatches.len())
    }

    /// Submits every dispatch on its own (in order) and waits for it before the next, so no
    /// two timed dispatches overlap; returns each one's GPU time in ns.
    pub fn time_isolated(&self, dispatches: &[TimedDispatch<'_>]) -> Result<Vec<f64>> {
        self.check_len(dispatches.len())?;
        if dispatches.is_empty() {
            return Ok(Vec::new());
        }
        for (i, d) in dispatches.iter().enumerate() {
            let q = 2 * i as u32;
            submit_blocking(&self.ctx, DURING, |enc| {
                encode_plan_timed(
                    &self.ctx,
                    enc,
                    d.path,
                    d.plan,
                    d.storage,
                    &self.query_set,
                    q,
                    q + 1,
                )
            })?;
        }
        self.read(dispatches.len())
    }

    /// Resolves the first `n` (begin, end) pairs and converts them to ns.
    fn read(&self, n: usize) -> Result<Vec<f64>> {
        let queries = 2 * n as u32;
        submit_blocking(&self.ctx, DURING, |enc| {
            enc.resolve_query_set(&self.query_set, 0..queries, &self.resolve, 0);
            Ok(())
        })?;
        let bytes = readback(
            &self.ctx,
            &self.resolve,
            u64::from(queries) * u64::from(wgpu::QUERY_SIZE),
        )?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&bytes);
        ticks
            .chunks_exact(2)
            .enumerate()
            .map(|(i, t)| {
                if t[1] < t[0] {
                    return Err(err(format!(
                        "timestamps of dispatch {i} went backwards ({} then {})",
                        t[0], t[1]
                    )));
                }
                Ok((t[1] - t[0]) as f64 * self.period_ns)
            })
            .collect()
    }
}
