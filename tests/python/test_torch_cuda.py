"""A PyTorch worker whose model is on a CUDA device: the parameters and gradients are views
of one flat device buffer each, the host side is page-locked, and it trains exactly as
the same worker on the CPU does. Skipped without a usable CUDA device (torch's view)."""

import pytest

torch = pytest.importorskip("torch")
import groupsgd.torch as gt  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no usable CUDA device")
FAST = ["--heartbeat-ms", "300", "--model", "external", "--log-level", "warn", "--mode", "sync",
        "--workers", "1", "--max-seconds", "60"]


def small():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 10))


def train(daemon, device, steps=10):
    """`steps` group steps on one fixed batch; the parameters after them and the losses."""
    d = daemon(*FAST)
    model = small().to(device)
    w = gt.Worker(model, coordinator=d.endpoint, name=f"on-{device}", connect_timeout_ms=20000)
    try:
        g = torch.Generator().manual_seed(5)
        x = torch.rand(w.batch_size, 784, generator=g).to(device)
        y = torch.randint(0, 10, (w.batch_size,), generator=g).to(device)
        losses = []
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            assert w.step(loss)["accepted"]
            losses.append(loss.item())
        flat = w._flat
        if device == "cuda":
            # One flat device buffer behind the parameters and one behind the gradients.
            base = flat.device_flat.data_ptr()
            end = base + flat.count * 4
            assert all(base <= p.data_ptr() < end for p in model.parameters())
            assert flat.host_flat.is_pinned()
            assert flat.grad_pinned, "cudaHostRegister refused the gradient buffer"
            # The device holds the replica the session wrote into the host buffer.
            torch.cuda.synchronize()
            assert torch.equal(flat.device_flat.cpu(), flat.host_flat)
            assert all(float(p.grad.abs().sum()) == 0 for p in model.parameters())
        return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()]), losses
    finally:
        w.close()


@needs_cuda
def test_a_cuda_worker_trains_as_the_same_worker_on_the_cpu(daemon):
    cpu_params, cpu_losses = train(daemon, "cpu")
    gpu_params, gpu_losses = train(daemon, "cuda")
    assert gpu_losses[-1] < gpu_losses[0]
    # Same initial model, batch and group optimizer: only float rounding (cuBLAS sums in
    # another order) separates the two.
    assert torch.allclose(gpu_params, cpu_params, rtol=1e-3, atol=1e-5), \
        float((gpu_params - cpu_params).abs().max())
    assert abs(gpu_losses[-1] - cpu_losses[-1]) <= 1e-3 * cpu_losses[0]


@needs_cuda
def test_a_gradient_replaced_by_the_script_still_reaches_the_push(daemon):
    # zero_grad(set_to_none=True) leaves param.grad None; backward() makes new tensors,
    # which the step copies into the flat device buffer before the one copy to the host.
    d = daemon(*FAST)
    model = small().to("cuda")
    w = gt.Worker(model, coordinator=d.endpoint, name="set-to-none", connect_timeout_ms=20000)
    try:
        before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        x = torch.rand(w.batch_size, 784, device="cuda")
        y = torch.randint(0, 10, (w.batch_size,), device="cuda")
        for p in model.parameters():
            p.grad = None
        torch.nn.functional.cross_entropy(model(x), y).backward()
        assert w.step()["accepted"]
        after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        assert not torch.equal(before, after)  # the gradient arrived and was applied
    finally:
        w.close()


@needs_cuda
def test_a_real_grad_scaler_is_unscaled_before_the_push_and_backs_off_after_an_overflow(daemon):
    # torch.cuda.amp.GradScaler as documented in docs/pytorch.md ("Mixed precision"): the
    # pushed gradient is the unscaled one, an inf skips the step and halves the scale.
    # One group, no central exchange in two steps, plain SGD: a step moves by -0.1 * grad.
    grouped = [a if a != "sync" else "grouped" for a in FAST]
    d = daemon(*grouped, "--groups", "1", "--exchange-period", "1000", "--lr", "0.1",
               "--momentum", "0")
    model = small().to("cuda")
    w = gt.Worker(model, coordinator=d.endpoint, name="amp", connect_timeout_ms=20000)
    try:
        scaler = torch.cuda.amp.GradScaler(init_scale=1024.0, growth_interval=1000)
        x = torch.rand(w.batch_size, 784, device="cuda")
        y = torch.randint(0, 10, (w.batch_size,), device="cuda")
        # The plain gradient of this batch, for comparison (zeroed again by hand).
        torch.nn.functional.cross_entropy(model(x), y).backward()
        plain = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
        for p in model.parameters():
            p.grad.zero_()
        before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
        with torch.autocast("cuda"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        r = w.step(loss, scaler=scaler)
        assert r["accepted"] and not r["skipped_nonfinite"]
        after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        # autocast computes in float16: close to, not equal to, the float32 gradient.
        assert torch.allclose(before - after, 0.1 * plain, rtol=0.05, atol=1e-4)
        assert scaler.get_scale() == 1024.0
        # An overflow: skipped, the model unchanged, the scale backed off.
        before = after.clone()
        with torch.autocast("cuda"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        next(model.parameters()).grad[0, 0] = float("inf")
        r = w.step(loss, scaler=scaler)
        assert r["skipped_nonfinite"] and w.skipped_nonfinite == 1
        assert torch.equal(torch.cat([p.detach().reshape(-1) for p in model.parameters()]), before)
        assert scaler.get_scale() == 512.0
    finally:
        w.close()
