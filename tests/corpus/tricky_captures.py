"""Writes captures that are hard to read right, for the tshark comparison
(tests/tests/e2e/tshark_corpus.rs): DNS over TCP cut every way a sender or a
capture cuts it, fragmented datagrams, every link layer tcpdump and dumpcap
write, nanosecond timestamps, tunnels, and malformed records.

    python3 tricky_captures.py OUT_DIR

Each file holds DNS messages tshark decodes; dnsloop's `analyze --packets` must
name the same ones. pcapng files with several interfaces and snap-length cuts
are made from these with mergecap and editcap, by the test.
"""
import logging
import os
import sys

# scapy warns of every MAC it cannot resolve and every link type mixed in a file: all meant.
logging.getLogger("scapy").setLevel(logging.ERROR)

from scapy.all import (  # noqa: E402
    DNS,
    DNSQR,
    DNSRR,
    DNSRROPT,
    IP,
    TCP,
    UDP,
    Dot1AD,
    Dot1Q,
    Ether,
    IPv6,
    Loopback,
    Raw,
    fragment,
    fragment6,
    IPv6ExtHdrFragment,
)
from scapy.contrib.geneve import GENEVE
from scapy.layers.l2 import CookedLinux, CookedLinuxV2
from scapy.layers.vxlan import VXLAN
from scapy.utils import PcapWriter

CLIENT, SERVER = "10.244.1.5", "10.96.0.10"
CLIENT6, SERVER6 = "fd00:10:244:1::5", "fd00:10:96::a"
NODE_A, NODE_B = "192.168.56.11", "192.168.56.12"
START = 1_764_000_000.0


def query(qid, name, qtype="A", edns=None):
    ar = DNSRROPT(rclass=edns) if edns else None
    return DNS(id=qid, rd=1, qd=DNSQR(qname=name, qtype=qtype), ar=ar)


def answer(qid, name, qtype="A", records=1, rcode=0, txt_size=0):
    if txt_size:
        chunks = [b"x" * 250] * (txt_size // 250)
        an = DNSRR(rrname=name, type="TXT", ttl=30, rdata=chunks)
    else:
        an = None
        for index in range(records):
            record = DNSRR(rrname=name, type="A", ttl=30, rdata=f"10.1.{index // 250}.{index % 250 + 1}")
            an = record if an is None else an / record
    return DNS(id=qid, qr=1, aa=1, rd=1, ra=1, rcode=rcode, qd=DNSQR(qname=name, qtype=qtype), an=an)


class Clock:
    def __init__(self):
        self.now = START

    def stamp(self, packet, step=0.001):
        self.now += step
        packet.time = self.now
        return packet


def write(out, name, packets, linktype=None, nano=False):
    writer = PcapWriter(os.path.join(out, name), linktype=linktype, nano=nano, sync=True)
    for packet in packets:
        writer.write(packet)
    writer.close()


def tcp_conversation(clock, flights, sport=41000, ip=IP, client=CLIENT, server=SERVER):
    """A TCP connection, from handshake to close, carrying `flights`: [(from_client,
    [segment payload])], each payload sent as one segment."""
    link = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    back = Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
    seq = {True: 1000, False: 5000}
    packets = []

    def segment(from_client, flags, data=b""):
        src, dst, ether = (client, server, link) if from_client else (server, client, back)
        ports = dict(sport=sport, dport=53) if from_client else dict(sport=53, dport=sport)
        ack = seq[not from_client] if "A" in flags else 0
        packet = ether / ip(src=src, dst=dst) / TCP(seq=seq[from_client], ack=ack, flags=flags, **ports)
        if data:
            packet = packet / Raw(data)
        packets.append(clock.stamp(packet))
        seq[from_client] += len(data) + (1 if ("S" in flags or "F" in flags) else 0)

    segment(True, "S")
    segment(False, "SA")
    segment(True, "A")
    for from_client, payloads in flights:
        for data in payloads:
            segment(from_client, "PA", data)
    segment(True, "FA")
    segment(False, "FA")
    segment(True, "A")
    return packets


def exchanges_cut(exchanges, cut):
    """Flights for `exchanges` [(query, reply)], each framed message cut by `cut`."""
    flights = []
    for question, reply in exchanges:
        flights.append((True, cut(framed(question))))
        flights.append((False, cut(framed(reply))))
    return flights


def framed(message):
    wire = bytes(message)
    return len(wire).to_bytes(2, "big") + wire


def tcp_captures(out):
    clock = Clock()
    names = ["api.default.svc.cluster.local", "www.example.test", "kubernetes.default.svc.cluster.local"]
    exchanges = [(query(0x100 + i, n), answer(0x100 + i, n)) for i, n in enumerate(names)]
    # The length alone, then the message: what a reader of single segments misreads.
    apart = exchanges_cut(exchanges, lambda b: [b[:2], b[2:]])
    write(out, "tcp_length_apart.pcap", tcp_conversation(clock, apart))
    # Pipelined: every query in one segment, every reply in one.
    pipelined = [
        (True, [b"".join(framed(q) for q, _ in exchanges)]),
        (False, [b"".join(framed(r) for _, r in exchanges)]),
    ]
    write(out, "tcp_pipelined.pcap", tcp_conversation(clock, pipelined, sport=41001))
    # One large reply across several segments, cut at odd places.
    big = [(query(0x200, "many.example.test"), answer(0x200, "many.example.test", records=120))]
    odd = exchanges_cut(big, lambda b: [b[:1], b[1:700], b[700:1400], b[1400:]])
    write(out, "tcp_split.pcap", tcp_conversation(clock, odd, sport=41002))
    # Reordered and retransmitted segments.
    halves = exchanges_cut(big + exchanges[:1], lambda b: [b[:600], b[600:]] if len(b) > 600 else [b])
    packets = tcp_conversation(clock, halves, sport=41003)
    data = [i for i, p in enumerate(packets) if Raw in p]
    packets[data[2]], packets[data[3]] = packets[data[3]], packets[data[2]]
    packets.insert(data[1] + 1, packets[data[0]].copy())
    for packet in packets:
        clock.stamp(packet)
    write(out, "tcp_reordered.pcap", packets)
    # IPv6, the length apart again.
    apart6 = exchanges_cut(exchanges[:2], lambda b: [b[:2], b[2:]])
    write(out, "tcp_ipv6.pcap", tcp_conversation(clock, apart6, sport=41004, ip=IPv6, client=CLIENT6, server=SERVER6))


def udp(src, dst, message, sport=53000, dport=53, ip=IP):
    return ip(src=src, dst=dst) / UDP(sport=sport, dport=dport) / message


def fragment_captures(out):
    clock = Clock()
    ether = lambda: Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
    q = query(0x300, "big.example.test", "TXT", edns=4096)
    reply = udp(SERVER, CLIENT, answer(0x300, "big.example.test", "TXT", txt_size=3000), sport=53, dport=53000)
    reply[IP].id = 0x4321
    pieces = fragment(reply, fragsize=1400)
    # The last fragment first, as a path that reorders delivers it.
    pieces = pieces[-1:] + pieces[:-1]
    packets = [clock.stamp(Ether() / udp(CLIENT, SERVER, q))]
    packets += [clock.stamp(ether() / piece) for piece in pieces]
    write(out, "ipv4_fragments.pcap", packets)

    q6 = query(0x301, "big.example.test", "TXT", edns=4096)
    reply6 = IPv6(src=SERVER6, dst=CLIENT6) / IPv6ExtHdrFragment(id=0xbeef) / UDP(sport=53, dport=53001) / answer(0x301, "big.example.test", "TXT", txt_size=3000)
    pieces6 = fragment6(reply6, 1280)
    packets = [clock.stamp(Ether() / udp(CLIENT6, SERVER6, q6, sport=53001, ip=IPv6))]
    packets += [clock.stamp(ether() / piece) for piece in reversed(pieces6)]
    write(out, "ipv6_fragments.pcap", packets)


def exchange(qid, name, **kwargs):
    return (
        udp(CLIENT, SERVER, query(qid, name), sport=50000 + qid % 1000),
        udp(SERVER, CLIENT, answer(qid, name, **kwargs), sport=53, dport=50000 + qid % 1000),
    )


def link_captures(out):
    clock = Clock()
    pairs = [exchange(0x400 + i, name) for i, name in enumerate(["a.example.test", "b.example.test"])]
    flat = [packet for pair in pairs for packet in pair]
    # 802.1Q, QinQ, and a trailer after the IP datagram (Ethernet padding or a switch's tag).
    tagged = [clock.stamp(Ether() / Dot1Q(vlan=10) / flat[0]), clock.stamp(Ether() / Dot1Q(vlan=10) / flat[1])]
    tagged += [clock.stamp(Ether(type=0x88A8) / Dot1AD(vlan=20) / Dot1Q(vlan=30) / p) for p in flat[2:]]
    tagged += [clock.stamp(Ether() / p / Raw(b"\x00" * 6)) for p in exchange(0x410, "padded.example.test")]
    write(out, "vlan_and_padding.pcap", tagged)
    write(out, "cooked_v1.pcap", [clock.stamp(CookedLinux(pkttype=0 if i % 2 else 4, proto=0x0800) / p) for i, p in enumerate(flat)])
    write(out, "cooked_v2.pcap", [clock.stamp(CookedLinuxV2(proto=0x0800, ifindex=3 + i % 2, pkttype=0 if i % 2 else 4) / p) for i, p in enumerate(flat)])
    write(out, "raw_ip.pcap", [clock.stamp(p.copy()) for p in flat], linktype=101)
    write(out, "null_loopback.pcap", [clock.stamp(Loopback(type=2) / p) for p in flat], linktype=0)
    write(out, "nanosecond.pcap", [clock.stamp(Ether() / p, step=0.000000123) for p in flat], nano=True)


def tunnel_captures(out):
    clock = Clock()
    packets = []
    for port, qid in [(4789, 0x500), (8472, 0x502)]:
        for inner in exchange(qid, f"tunnel{port}.example.test"):
            outer = Ether() / IP(src=NODE_A, dst=NODE_B) / UDP(sport=40000 + qid % 100, dport=port) / VXLAN(vni=1, flags=0x08) / Ether() / inner
            packets.append(clock.stamp(outer))
    for inner in exchange(0x504, "geneve.example.test"):
        packets.append(clock.stamp(Ether() / IP(src=NODE_A, dst=NODE_B) / UDP(sport=40100, dport=6081) / GENEVE(vni=2, proto=0x6558) / Ether() / inner))
    write(out, "tunnels.pcap", packets)


def malformed_captures(out):
    clock = Clock()
    q, r = exchange(0x600, "broken.example.test")
    # The answer's rdlength claims more than the message holds.
    wire = bytearray(bytes(r[DNS]))
    wire[-5] = 0x40
    broken = udp(SERVER, CLIENT, Raw(bytes(wire)), sport=53, dport=r[UDP].dport)
    servfail = exchange(0x601, "fail.example.test", rcode=2)
    nx = exchange(0x602, "nx.example.test", rcode=3)
    packets = [clock.stamp(Ether() / p) for p in [q, broken, *servfail, *nx]]
    write(out, "malformed_and_rcodes.pcap", packets)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tcp_captures(out)
    fragment_captures(out)
    link_captures(out)
    tunnel_captures(out)
    malformed_captures(out)


if __name__ == "__main__":
    main()
