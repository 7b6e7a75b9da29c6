use super::*;
use crate::peer_wire::HEADER_LEN;

fn gid(last: u8) -> Ipv6Addr {
    std::net::Ipv4Addr::new(10, 0, 1, last).to_ipv6_mapped()
}

fn ms(t0: Instant, i: u64) -> Instant {
    t0 + Duration::from_millis(i)
}

/// A responder admitting `senders`, and the cookie of each.
fn responder(senders: &[(Ipv6Addr, u32)], t0: Instant) -> (Responder, Vec<u64>) {
    let mut r = Responder::new(1, t0);
    r.set_admitted(senders.to_vec());
    let cookies = senders
        .iter()
        .map(|(g, q)| r.secret.cookie(g, *q))
        .collect();
    (r, cookies)
}

#[test]
fn a_proven_sender_is_answered_up_to_its_rate_and_an_honest_prober_always() {
    let t0 = Instant::now();
    let (mut r, c) = responder(&[(gid(2), 17)], t0);
    let echo = |v: Verdict| matches!(v, Verdict::Echo { .. });
    // A flood of 1,000 probes in one instant: the burst is answered.
    let echoes = (0..1000)
        .filter(|_| echo(r.admit(&gid(2), 17, c[0], 64, t0)))
        .count();
    assert_eq!(echoes, ANSWER_BURST as usize);
    // Over 10 s at 1,000/s: at most the rate (plus the burst).
    let answered = (0..10_000u64)
        .filter(|i| echo(r.admit(&gid(2), 17, c[0], 64, ms(t0, *i))))
        .count();
    assert!(
        answered <= (10.0 * ANSWERS_PER_SECOND) as usize + 1,
        "{answered}"
    );
    assert!(
        answered >= (9.0 * ANSWERS_PER_SECOND) as usize,
        "{answered}"
    );
    // An honest prober at the most a port sends, MTU-sized, is never refused.
    let (mut r, c) = responder(&[(gid(2), 17)], t0);
    let step = Duration::from_secs_f64(1.0 / MAX_PACKETS_PER_SECOND);
    assert!((0..2000u32).all(|i| echo(r.admit(&gid(2), 17, c[0], 4096, t0 + step * i))));
}

#[test]
fn an_admitted_sender_without_its_cookie_is_challenged_never_echoed() {
    let t0 = Instant::now();
    let (mut r, c) = responder(&[(gid(2), 17), (gid(3), 18)], t0);
    assert_eq!(
        r.admit(&gid(2), 17, 0, 64, t0),
        Verdict::Challenge { cookie: c[0] }
    );
    // Another sender's cookie, a cookie for another QPN, a made-up one:
    // challenged too (the cookie binds GID and QPN).
    assert!(matches!(
        r.admit(&gid(2), 17, c[1], 64, t0),
        Verdict::Challenge { .. }
    ));
    assert!(matches!(
        r.admit(&gid(3), 18, c[0], 64, t0),
        Verdict::Challenge { .. }
    ));
    assert!(matches!(
        r.admit(&gid(2), 17, 0xdead_beef, 64, t0),
        Verdict::Challenge { .. }
    ));
    assert_eq!(
        r.admit(&gid(2), 17, c[0], 64, t0),
        Verdict::Echo { cookie: c[0] }
    );
    // Challenges are bounded in all: an unproven flood draws at most the
    // burst at once and the rate after, never an echo.
    let (mut r, _) = responder(&[(gid(2), 17)], t0);
    let mut challenges = 0;
    for i in 0..10_000u64 {
        match r.admit(&gid(2), 17, i, 64, ms(t0, i)) {
            Verdict::Challenge { .. } => challenges += 1,
            Verdict::Refuse(DatagramRefusal::Unproven) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(
        challenges <= (10.0 * CHALLENGES_PER_SECOND + CHALLENGE_BURST) as usize,
        "{challenges}"
    );
    assert!(r.proven.is_empty(), "no state for unproven senders");
}

#[test]
fn a_sender_outside_the_admitted_set_gets_nothing_whatever_it_carries() {
    let t0 = Instant::now();
    let (mut r, _) = responder(&[(gid(2), 17)], t0);
    // A third party's address, even with the cookie it would get: the
    // responder sends nothing to an address it does not probe itself.
    let third = gid(99);
    let its_cookie = r.secret.cookie(&third, 5);
    for i in 0..1000u64 {
        assert_eq!(
            r.admit(
                &third,
                5,
                if i % 2 == 0 { 0 } else { its_cookie },
                64,
                ms(t0, i)
            ),
            Verdict::Refuse(DatagramRefusal::NotAdmitted)
        );
    }
    // An admitted GID with another QPN is another sender.
    assert_eq!(
        r.admit(&gid(2), 18, 0, 64, t0),
        Verdict::Refuse(DatagramRefusal::NotAdmitted)
    );
}

#[test]
fn forged_probes_in_a_peers_name_leave_its_real_probes_answered() {
    // B probes at the most a port sends (50/s) with its cookie; a forger
    // sends 1,000 probes a second in B's name (no cookie, guessed ones,
    // and the cookie B would have for another QPN) for 60 s.
    let t0 = Instant::now();
    let (mut r, c) = responder(&[(gid(2), 17), (gid(3), 18)], t0);
    let (mut real, mut real_echoed, mut forged_echoed, mut challenges) = (0, 0, 0, 0);
    for i in 0..60_000u64 {
        let now = ms(t0, i);
        let forged_cookie = match i % 3 {
            0 => 0,
            1 => i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            _ => r.secret.cookie(&gid(2), 18),
        };
        match r.admit(&gid(2), 17, forged_cookie, 4096, now) {
            Verdict::Echo { .. } => forged_echoed += 1,
            Verdict::Challenge { .. } => challenges += 1,
            Verdict::Refuse(_) => {}
        }
        if i % 20 == 0 {
            real += 1;
            if matches!(r.admit(&gid(2), 17, c[0], 4096, now), Verdict::Echo { .. }) {
                real_echoed += 1;
            }
        }
    }
    assert_eq!(forged_echoed, 0);
    assert_eq!(real_echoed, real, "every real probe answered");
    assert!(
        challenges <= (60.0 * CHALLENGES_PER_SECOND + CHALLENGE_BURST) as usize,
        "{challenges}"
    );
}

#[test]
fn no_set_of_proven_senders_draws_more_than_the_total_budget() {
    // 64 proven senders (one peer publishing 64 endpoints), each within
    // its own rate (80/s), MTU-sized, for 10 s: 51,200 probes.
    let t0 = Instant::now();
    let senders: Vec<(Ipv6Addr, u32)> = (0..64u32).map(|i| (gid(2), 100 + i)).collect();
    let (mut r, c) = responder(&senders, t0);
    let (mut echoes, mut bytes, mut over) = (0u64, 0u64, 0u64);
    for tick in 0..800u64 {
        let now = t0 + Duration::from_micros(tick * 12_500);
        for (k, (g, q)) in senders.iter().enumerate() {
            match r.admit(g, *q, c[k], 4096, now) {
                Verdict::Echo { .. } => {
                    echoes += 1;
                    bytes += 4096;
                }
                Verdict::Refuse(DatagramRefusal::TotalBudget) => over += 1,
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(over > 0);
    assert!(
        bytes as f64 <= 10.0 * TOTAL_ECHO_BYTES_PER_SECOND + TOTAL_ECHO_BYTE_BURST,
        "{bytes}"
    );
    // Small probes: the packet budget binds.
    let (mut r, c) = responder(&senders, t0);
    let mut echoes_small = 0u64;
    for tick in 0..800u64 {
        let now = t0 + Duration::from_micros(tick * 12_500);
        for (k, (g, q)) in senders.iter().enumerate() {
            if matches!(r.admit(g, *q, c[k], 64, now), Verdict::Echo { .. }) {
                echoes_small += 1;
            }
        }
    }
    assert!(
        echoes_small as f64 <= 10.0 * TOTAL_ECHOES_PER_SECOND + TOTAL_ECHO_BURST,
        "{echoes_small}"
    );
    assert!(echoes_small as f64 >= 9.0 * TOTAL_ECHOES_PER_SECOND);
    assert!(echoes > 0);
}

#[test]
fn cookies_outlive_one_rotation_and_echoes_carry_the_new_one() {
    let t0 = Instant::now();
    let (mut r, c) = responder(&[(gid(2), 17)], t0);
    let later = t0 + COOKIE_ROTATION + Duration::from_secs(1);
    let Verdict::Echo { cookie: fresh } = r.admit(&gid(2), 17, c[0], 64, later) else {
        panic!("the cookie of the key before is still valid");
    };
    assert_ne!(fresh, c[0]);
    assert!(matches!(
        r.admit(&gid(2), 17, fresh, 64, later),
        Verdict::Echo { .. }
    ));
    let much_later = later + COOKIE_ROTATION + Duration::from_secs(1);
    assert!(matches!(
        r.admit(&gid(2), 17, c[0], 64, much_later),
        Verdict::Challenge { .. }
    ));
}

#[test]
fn a_new_peer_list_keeps_the_rate_and_cookies_of_senders_that_stay() {
    let t0 = Instant::now();
    let (mut r, c) = responder(&[(gid(2), 17), (gid(3), 18)], t0);
    while matches!(r.admit(&gid(2), 17, c[0], 64, t0), Verdict::Echo { .. }) {}
    r.keep_cookie(&gid(3), 18, 42);
    r.keep_cookie(&gid(9), 18, 43);
    assert_eq!(
        (r.cookie_for(&gid(3), 18), r.cookie_for(&gid(9), 18)),
        (42, 0)
    );
    r.set_admitted(vec![(gid(3), 18), (gid(2), 17)]);
    assert_eq!(
        r.admit(&gid(2), 17, c[0], 64, t0),
        Verdict::Refuse(DatagramRefusal::RateLimited)
    );
    assert_eq!(r.cookie_for(&gid(3), 18), 42);
    r.set_admitted(vec![(gid(2), 17)]);
    assert!(!r.is_admitted(&gid(3), 18));
    assert_eq!(r.cookie_for(&gid(3), 18), 0);
}

/// Two responders that admit each other and hold each other's cookies,
/// joined by a wire that delivers every answer: what a forged datagram
/// starts.
fn exchange(forged: &[u8], steps: usize) -> (usize, Served, Served) {
    let t0 = Instant::now();
    let (ga, gb) = (gid(1), gid(2));
    let mut a = Responder::new(0xa, t0);
    let mut b = Responder::new(0xb, t0);
    a.set_admitted(vec![(gb, 20)]);
    b.set_admitted(vec![(ga, 10)]);
    let (mut sa, mut sb) = (Served::default(), Served::default());
    // (to A?, payload, sender gid, sender qpn)
    let mut wire: Vec<(bool, Vec<u8>, Ipv6Addr, u32)> = vec![(true, forged.to_vec(), gb, 20)];
    let mut carried = 0;
    for step in 0..steps {
        let Some((to_a, payload, g, q)) = wire.pop() else {
            break;
        };
        carried += 1;
        let now = ms(t0, step as u64);
        let d = Datagram {
            payload: &payload,
            gid: g,
            qpn: q,
            traffic_class: 106,
        };
        let (resp, served, me) = if to_a {
            (&mut a, &mut sa, (ga, 10))
        } else {
            (&mut b, &mut sb, (gb, 20))
        };
        if let Handled::Answer(m, _) = handle(&d, None, resp, now, served) {
            let size = if m.kind == MessageKind::Echo {
                payload.len()
            } else {
                HEADER_LEN
            };
            wire.push((!to_a, m.encode(size), me.0, me.1));
        }
    }
    (carried, sa, sb)
}

#[test]
fn a_forged_probe_naming_a_peer_starts_one_answer_never_a_loop() {
    // A probe "from B" with a nonce neither owns and no cookie: A
    // challenges B, and B drops the challenge (an answer is never
    // answered, and it answers no probe of B's).
    let forged = Message::probe(0x5eed_f00d, 1, 0x99, 0).encode(64);
    let (carried, sa, sb) = exchange(&forged, 100_000);
    assert_eq!(carried, 2, "the forged probe and one challenge");
    assert_eq!((sa.answered, sa.challenged, sa.unanswered()), (0, 0, 0));
    assert_eq!(sb.refused(DatagramRefusal::StrayAnswer), 1);
    // A forged echo or challenge gets nothing at all.
    for kind in [MessageKind::Echo, MessageKind::Challenge] {
        let mut m = Message::probe(1, 1, 1, 0);
        m.kind = kind;
        let (carried, sa, _) = exchange(&m.encode(64), 100);
        assert_eq!(carried, 1);
        assert_eq!(sa.refused(DatagramRefusal::StrayAnswer), 1);
    }
    // A probe of wire version 1 (the release before): counted as such,
    // never answered.
    let mut v1 = vec![0u8; 64];
    v1[..6].copy_from_slice(&[b'R', b'P', b'R', b'B', 1, 1]);
    let (carried, sa, _) = exchange(&v1, 100);
    assert_eq!(carried, 1);
    assert_eq!(sa.refused(DatagramRefusal::WireVersion), 1);
    // The payload format before the magic (nonce, seq, zeros) is foreign.
    let mut old = vec![0u8; 64];
    old[..4].copy_from_slice(&0x5eed_f00du32.to_be_bytes());
    let (carried, sa, _) = exchange(&old, 100);
    assert_eq!(carried, 1);
    assert_eq!(sa.refused(DatagramRefusal::Foreign), 1);
}

#[test]
fn the_answer_to_the_probe_in_flight_ends_the_wait_and_nothing_else_does() {
    let t0 = Instant::now();
    let f = InFlight {
        gid: gid(2),
        qpn: 20,
        nonce: 7,
        seq: 3,
    };
    let echo = Message {
        kind: MessageKind::Echo,
        nonce: 7,
        seq: 3,
        incarnation: 9,
        hold_ns: 1500,
        cookie: 5,
    };
    let d = |payload: &[u8], g: Ipv6Addr, q: u32| {
        let mut out = Served::default();
        let mut r = Responder::new(1, t0);
        let h = handle(
            &Datagram {
                payload,
                gid: g,
                qpn: q,
                traffic_class: 0,
            },
            Some(&f),
            &mut r,
            t0,
            &mut out,
        );
        (h, out)
    };
    assert_eq!(d(&echo.encode(64), gid(2), 20).0, Handled::Reply(echo));
    let mut challenge = echo;
    challenge.kind = MessageKind::Challenge;
    assert_eq!(
        d(&challenge.encode(HEADER_LEN), gid(2), 20).0,
        Handled::Reply(challenge)
    );
    // From another QPN, with another sequence: stray.
    assert_eq!(d(&echo.encode(64), gid(2), 21).0, Handled::Dropped);
    let mut late = echo;
    late.seq = 2;
    assert_eq!(d(&late.encode(64), gid(2), 20).0, Handled::Dropped);
    // A proven probe meanwhile is echoed, with the DSCP it came with.
    let (mut r, c) = responder(&[(gid(4), 40)], t0);
    let mut served = Served::default();
    let probe = Message::probe(55, 1, 4, c[0]).encode(64);
    let h = handle(
        &Datagram {
            payload: &probe,
            gid: gid(4),
            qpn: 40,
            traffic_class: 107,
        },
        Some(&f),
        &mut r,
        t0,
        &mut served,
    );
    match h {
        Handled::Answer(m, tc) => {
            assert_eq!(
                (m.kind, m.nonce, m.incarnation, m.cookie, tc),
                (MessageKind::Echo, 55, 1, c[0], 106)
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn served_counts_add_up_by_reason() {
    let mut a = Served::default();
    a.refuse(DatagramRefusal::Foreign);
    a.refuse(DatagramRefusal::StrayAnswer);
    a.answered = 2;
    a.challenged = 1;
    let mut total = Served::default();
    total.add(&a);
    total.add(&a);
    assert_eq!((total.answered, total.challenged), (4, 2));
    assert_eq!(total.refused(DatagramRefusal::Foreign), 2);
    assert_eq!(total.unanswered(), 4);
    assert_eq!(
        DatagramRefusal::ALL
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>(),
        [
            "foreign",
            "wire_version",
            "stray_answer",
            "not_admitted",
            "unproven",
            "rate_limited",
            "total_budget",
            "answer_failed"
        ]
    );
}
