// js-libp2p 3 targets Node.js 22; on Node.js 20 it needs Promise.withResolvers (ES2024).
// Imported first by js_peer.mjs, so it runs before any libp2p module is evaluated.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
