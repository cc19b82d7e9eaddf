// A js-libp2p peer for swarm-node's interop test: joins a private network (pnet key file),
// subscribes to one gossip topic and answers JSON commands, one per line on stdin:
//   {"cmd": "dial", "addr": "/ip4/127.0.0.1/tcp/N/p2p/ID"}  -> {"ok": true}
//   {"cmd": "mesh"}                -> {"ok": true, "mesh": [peer IDs], "subscribers": [...]}
//   {"cmd": "publish", "hex": H}   -> {"ok": true, "recipients": n}
//   {"cmd": "received"}            -> {"ok": true, "messages": [{data, from, seqno, msg_id,
//                                      source}]}  (every delivery so far, duplicates included)
//   {"cmd": "exit"}
// Usage: node js_peer.mjs KEY_FILE TOPIC [MAX_LIFETIME_S]. Prints {"event": "ready", ...} first.
import './node20.mjs'
import { readFileSync } from 'node:fs'
import readline from 'node:readline'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { gossipsub } from '@libp2p/gossipsub'
import { identify } from '@libp2p/identify'
import { preSharedKey } from '@libp2p/pnet'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'

const [keyFile, topic, lifetime = '120'] = process.argv.slice(2)
setTimeout(() => process.exit(3), Number(lifetime) * 1000).unref()

const hex = (bytes) => Buffer.from(bytes).toString('hex')
const node = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  connectionProtector: preSharedKey({ psk: readFileSync(keyFile) }),
  services: {
    identify: identify(),
    pubsub: gossipsub({ allowPublishToZeroTopicPeers: true, emitSelf: false })
  }
})
const delivered = []
node.services.pubsub.addEventListener('gossipsub:message', (event) => {
  const { msg, msgId, propagationSource } = event.detail
  delivered.push({
    data: hex(msg.data),
    from: msg.from.toString(),
    seqno: msg.sequenceNumber.toString(16).padStart(16, '0'),
    msg_id: msgId,
    source: propagationSource.toString()
  })
})
node.services.pubsub.subscribe(topic)
const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
say({
  event: 'ready',
  peer_id: node.peerId.toString(),
  addrs: node.getMultiaddrs().map((a) => a.toString())
})

const handlers = {
  dial: async (cmd) => { await node.dial(multiaddr(cmd.addr)); return {} },
  mesh: async () => ({
    mesh: node.services.pubsub.getMeshPeers(topic),
    subscribers: node.services.pubsub.getSubscribers(topic).map((p) => p.toString())
  }),
  publish: async (cmd) => {
    const result = await node.services.pubsub.publish(topic, Buffer.from(cmd.hex, 'hex'))
    return { recipients: result.recipients.length }
  },
  received: async () => ({ messages: delivered })
}

const lines = readline.createInterface({ input: process.stdin })
for await (const line of lines) {
  const cmd = JSON.parse(line)
  if (cmd.cmd === 'exit') break
  try {
    say({ ok: true, ...(await handlers[cmd.cmd](cmd)) })
  } catch (err) {
    say({ ok: false, error: String(err) })
  }
}
await node.stop()
process.exit(0)
