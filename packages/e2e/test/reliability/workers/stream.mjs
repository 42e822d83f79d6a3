// Both directions of a pipe kept busy with large tensors until it fails;
// resolves with the codes the pending read and write rejected with.
const cpu = { type: "cpu", index: 0 };

export function streamUntilFailure(pipe, bytes) {
  const out = new Uint8Array(bytes);
  const into = new Uint8Array(bytes);
  const writing = (async () => {
    for (;;) await pipe.write({ tensors: [{ buffer: out, targetDevice: cpu }] });
  })();
  const reading = (async () => {
    for (;;) {
      const d = await pipe.readDescriptor();
      await pipe.read({ payloads: [], tensors: d.tensors.map(() => ({ buffer: into })) });
    }
  })();
  return Promise.allSettled([reading, writing]).then((r) => r.map((x) => x.reason?.code ?? "none"));
}
