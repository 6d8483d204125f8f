// The transmitter reuses its frame ring for headers and short messages (frame-ring.ts): the PAD
// and, with CRCs off, the CRC field of every FPDU must be written as zeros over whatever an
// earlier message left there. Checked octet by octet on the bytes handed to the sink.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Transmitter, type ByteSink, type WriteDone } from '../../host/rnic/transmit.ts';
import { fpduPadding, MPA_LENGTH_FIELD } from '../../host/rnic/wire/mpa.ts';
import { RdmapOpcode } from '../../host/rnic/wire/rdmap.ts';
import { QN_SEND } from '../../host/rnic/wire/ddp.ts';

/** Keeps each write's octets (copied) and completes it when told, as a socket would later. */
class CollectingSink implements ByteSink {
  readonly writes: Uint8Array[] = [];
  private readonly dones: Array<WriteDone | undefined> = [];
  readonly pendingBytes = 0;
  write(chunks: readonly Uint8Array[], count: number, done: WriteDone | undefined): void {
    const length = chunks.slice(0, count).reduce((sum, chunk) => sum + chunk.length, 0);
    const bytes = new Uint8Array(length);
    let at = 0;
    for (let i = 0; i < count; i++) {
      bytes.set(chunks[i]!, at);
      at += chunks[i]!.length;
    }
    this.writes.push(bytes);
    this.dones.push(done);
  }
  completeAll(): void {
    for (const done of this.dones.splice(0)) done?.();
  }
}

test('PAD and the unused CRC field are zeros over ring space an earlier message dirtied', () => {
  const sink = new CollectingSink();
  const transmitter = new Transmitter(sink, { crc: false, markers: false, mulpdu: 8192 });
  // A 4000-octet inline Send fills the ring's first octets with 0xff; once its write completes
  // the ring is empty and the next message starts over at the same offset.
  transmitter.sendUntagged(RdmapOpcode.Send, QN_SEND, 0, undefined, [new Uint8Array(4000).fill(0xff)], 4000);
  sink.completeAll();
  for (let length = 1; length <= 9; length++) {
    transmitter.sendUntagged(RdmapOpcode.Send, QN_SEND, 0, undefined, [new Uint8Array(length).fill(0xee)], length);
    const fpdu = sink.writes.at(-1)!;
    sink.completeAll();
    const ulpduLength = (fpdu[0]! << 8) | fpdu[1]!;
    const padding = fpduPadding(ulpduLength);
    assert.is(fpdu.length, MPA_LENGTH_FIELD + ulpduLength + padding + 4, `payload ${length}: one FPDU`);
    const trailer = fpdu.subarray(MPA_LENGTH_FIELD + ulpduLength);
    assert.equal(Array.from(trailer), new Array(padding + 4).fill(0), `payload ${length}: PAD (${padding}) and CRC field zeroed`);
  }
});

test.run();
