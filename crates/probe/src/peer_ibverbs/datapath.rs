//! The port's datapath: posting receives, sending through kept address
//! handles, polling completions, answering what arrives, and the
//! [`PeerPort`] the prober drives.

use super::headers::grh_sender;
use super::*;

impl UdPort {
    pub(super) fn post_recv(&mut self, slot: usize) -> Result<(), Failure> {
        // SAFETY: mr is live (setup created it before any receive).
        let lkey = unsafe { (*self.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.buf.addr(slot * SLOT),
            length: SLOT as u32,
            lkey,
        };
        let mut wr = ibv_recv_wr {
            wr_id: slot as u64,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: qp is live; the SGE lies in the registered buffer and the
        // slot has no other request outstanding (it was just completed).
        let rc = unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostRecv, "ibv_post_recv".into(), rc));
        }
        Ok(())
    }

    /// Sends `payload` to `qpn` through the address handle of `key`
    /// (`ah`); returns the `wr_id` of the send.
    pub(super) fn send(
        &mut self,
        key: AhKey,
        ah: AhPtr,
        qpn: u32,
        payload: &[u8],
    ) -> Result<u64, Failure> {
        let slot = match self.send_busy.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                // Every slot busy: reap send completions for a moment.
                let until = Instant::now() + Duration::from_millis(10);
                loop {
                    self.reap_sends(None)?;
                    if let Some(s) = self.send_busy.iter().position(Option::is_none) {
                        break s;
                    }
                    if Instant::now() >= until {
                        return Err(Failure::new(
                            Reason::PostSend,
                            "every send slot still in flight".to_string(),
                        ));
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        };
        let len = payload.len().min(MAX_PAYLOAD);
        let offset = (RECV_SLOTS + slot) * SLOT;
        self.buf
            .write(offset, payload.get(..len).unwrap_or(payload));
        // SAFETY: mr is live.
        let lkey = unsafe { (*self.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.buf.addr(offset),
            length: len as u32,
            lkey,
        };
        // SAFETY: an all-zero send WR is valid (null pointers, zero unions).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        self.sends += 1;
        wr.wr_id = SEND_ID + self.sends * SEND_SLOTS as u64 + slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud.ah = ah.0;
        wr.wr.ud.remote_qpn = qpn;
        wr.wr.ud.remote_qkey = QKEY;
        let mut bad = ptr::null_mut();
        // SAFETY: qp and ah are live (the cache keeps the handle until the
        // send completes); the SGE lies in the registered buffer in a slot
        // with no request outstanding.
        let rc = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(os_fail(Reason::PostSend, "ibv_post_send (UD)".into(), rc));
        }
        if let Some(ahs) = self.ahs.as_mut() {
            ahs.hold(&key);
        }
        self.send_busy[slot] = Some(key);
        Ok(wr.wr_id)
    }

    /// The address handle of `key` now, without waiting.
    pub(super) fn handle_for(&mut self, key: &AhKey) -> Lookup<AhPtr> {
        match self.ahs.as_mut() {
            Some(ahs) => ahs.get(key, Instant::now()),
            None => Lookup::Failed(libc::EPIPE),
        }
    }

    /// Frees the slots of completed sends (their address handles stay in
    /// the cache); returns the failure of the send `expect` names, if it
    /// failed.
    pub(super) fn reap_sends(&mut self, expect: Option<&Expect>) -> Result<Option<Event>, Failure> {
        // SAFETY: an all-zero work completion is valid.
        let mut wcs: [ibv_wc; SEND_SLOTS] = unsafe { std::mem::zeroed() };
        // SAFETY: send_cq is live; wcs has room for SEND_SLOTS completions.
        let n = unsafe { ibv_poll_cq(self.send_cq, wcs.len() as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(os_fail(Reason::PollCq, "ibv_poll_cq (send)".into(), -n));
        }
        let mut event = None;
        for wc in wcs.iter().take(n as usize) {
            let slot = (wc.wr_id.wrapping_sub(SEND_ID) % SEND_SLOTS as u64) as usize;
            if let Some(key) = self.send_busy.get_mut(slot).and_then(Option::take) {
                if let Some(ahs) = self.ahs.as_mut() {
                    ahs.release(&key);
                }
            }
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS
                && expect.is_some_and(|e| e.wr_id == wc.wr_id)
            {
                event = Some(Event::SendFailed(wc.status, wc.vendor_err));
            }
        }
        Ok(event)
    }

    /// Polls the CQs once and handles what completed: frees finished
    /// sends, answers probes, sends the answers whose address handle came
    /// in, reposts receives. Returns how many datagrams were received and
    /// what happened to `expect` (the probe in flight), if anything.
    pub(super) fn poll_once(
        &mut self,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Result<(usize, Option<Event>), Failure> {
        let mut event = self.reap_sends(expect)?;
        self.send_waiting(served);
        // SAFETY: an all-zero work completion is valid.
        let mut wcs: [ibv_wc; 8] = unsafe { std::mem::zeroed() };
        // SAFETY: recv_cq is live; wcs has room for 8 completions.
        let n = unsafe { ibv_poll_cq(self.recv_cq, wcs.len() as i32, wcs.as_mut_ptr()) };
        if n < 0 {
            return Err(os_fail(Reason::PollCq, "ibv_poll_cq (receive)".into(), -n));
        }
        for wc in wcs.iter().take(n as usize) {
            let slot = wc.wr_id as usize;
            if slot >= RECV_SLOTS {
                continue;
            }
            if wc.status == ibv_wc_status::IBV_WC_SUCCESS {
                if let Some(e) = self.received(slot, wc, expect, responder, served) {
                    event = Some(e);
                }
            }
            // A flushed receive (QP in error) fails to post: reported here.
            self.post_recv(slot)?;
        }
        Ok((n as usize, event))
    }

    /// Handles one received datagram in receive slot `slot`.
    pub(super) fn received(
        &mut self,
        slot: usize,
        wc: &ibv_wc,
        expect: Option<&Expect>,
        responder: &mut Responder,
        served: &mut Served,
    ) -> Option<Event> {
        let at = Instant::now();
        let len = (wc.byte_len as usize).min(SLOT);
        let has_grh = wc.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0;
        let grh = self.buf.slice(slot * SLOT, GRH_LEN as usize);
        let sender = if has_grh { grh_sender(grh) } else { None };
        let Some((gid, ipv4)) = sender else {
            served.refuse(DatagramRefusal::Foreign);
            return None;
        };
        let traffic_class = grh_traffic_class(grh, ipv4).unwrap_or(0);
        let payload_len = len.saturating_sub(GRH_LEN as usize);
        let payload = self
            .buf
            .slice(slot * SLOT + GRH_LEN as usize, payload_len)
            .to_vec();
        let d = Datagram {
            payload: &payload,
            gid,
            qpn: wc.src_qp,
            traffic_class,
        };
        match handle(&d, expect.map(|e| &e.flight), responder, at, served) {
            Handled::Reply(m) => Some(Event::Reply(at, m)),
            Handled::Answer(msg, tc) => {
                // An echo is as large as its probe (the reverse path
                // carries the same size); "not admitted" is the header.
                let size = match msg.kind {
                    MessageKind::Echo => payload.len(),
                    _ => HEADER_LEN,
                };
                let key = AhKey {
                    gid,
                    traffic_class: tc,
                    flow_label: flow_label(
                        u64::from(msg.nonce),
                        u64::from(msg.seq),
                        DEFAULT_FLOW_LABELS,
                    ),
                };
                self.waiting.push_back(WaitingAnswer {
                    key,
                    qpn: wc.src_qp,
                    msg,
                    size,
                    received: at,
                });
                if self.waiting.len() > WAITING_ANSWERS {
                    self.waiting.pop_front();
                    served.refuse(DatagramRefusal::AnswerFailed);
                }
                self.send_waiting(served);
                None
            }
            Handled::Dropped => None,
        }
    }

    /// Sends the waiting answers whose address handle is there, in order;
    /// drops those whose handle failed or that waited too long.
    pub(super) fn send_waiting(&mut self, served: &mut Served) {
        let mut keep = std::collections::VecDeque::new();
        while let Some(w) = self.waiting.pop_front() {
            match self.handle_for(&w.key) {
                Lookup::Ready(ah) => {
                    let mut msg = w.msg;
                    if msg.kind == MessageKind::Echo {
                        msg.hold_ns =
                            u32::try_from(w.received.elapsed().as_nanos()).unwrap_or(u32::MAX);
                    }
                    match self.send(w.key, ah, w.qpn, &msg.encode(w.size)) {
                        Ok(_) if msg.kind == MessageKind::Echo => served.answered += 1,
                        Ok(_) => served.not_admitted += 1,
                        // A failed answer is the peer's loss to see, not
                        // this port's error.
                        Err(_) => served.refuse(DatagramRefusal::AnswerFailed),
                    }
                }
                Lookup::Waiting if w.received.elapsed() < ANSWER_PATIENCE => keep.push_back(w),
                Lookup::Waiting | Lookup::Failed(_) => served.refuse(DatagramRefusal::AnswerFailed),
            }
        }
        self.waiting = keep;
    }
}

/// The probe in flight: whose answer ends a ping.
pub(super) struct Expect {
    flight: InFlight,
    /// The probe's send.
    wr_id: u64,
}

pub(super) enum Event {
    /// The answer to the probe in flight, received at this instant.
    Reply(Instant, Message),
    SendFailed(u32, u32),
}

impl PeerPort for UdPort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (self.gid, self.qpn, self.mtu)
    }

    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        timeout: Duration,
        responder: &mut Responder,
        served: &mut Served,
    ) -> ProbeOutcome {
        // Answer what is waiting first, so that its answers do not count
        // against this probe's round trip.
        self.serve(responder, served);
        // The address handle comes before the clock starts; the port goes
        // on answering while the resolver waits for the neighbour.
        let key = AhKey {
            gid: to.gid,
            traffic_class: probe.traffic_class,
            flow_label: probe.flow_label,
        };
        let give_up = Instant::now() + timeout;
        let ah = loop {
            match self.handle_for(&key) {
                Lookup::Ready(ah) => break ah,
                Lookup::Failed(_) => return ProbeOutcome::Unresolved,
                Lookup::Waiting => {}
            }
            if Instant::now() >= give_up {
                return ProbeOutcome::Unresolved;
            }
            self.serve(responder, served);
            std::thread::sleep(Duration::from_micros(100));
        };
        let payload =
            Message::probe(probe.nonce, probe.seq, probe.incarnation).encode(probe.size as usize);
        let started = Instant::now();
        let wr_id = match self.send(key, ah, to.qpn, &payload) {
            Ok(s) => s,
            Err(f) => return ProbeOutcome::Failed(f),
        };
        let expect = Expect {
            flight: InFlight {
                gid: to.gid,
                qpn: to.qpn,
                nonce: probe.nonce,
                seq: probe.seq,
            },
            wr_id,
        };
        let deadline = started + timeout;
        let mut spins = 0u32;
        loop {
            match self
                .poll_once(Some(&expect), responder, served)
                .map(|(_, e)| e)
            {
                Ok(Some(Event::Reply(at, m))) => {
                    return match m.kind {
                        MessageKind::NotAdmitted => ProbeOutcome::NotAdmitted {
                            incarnation: m.incarnation,
                        },
                        _ => ProbeOutcome::Answered {
                            rtt: (at - started)
                                .saturating_sub(Duration::from_nanos(u64::from(m.hold_ns))),
                            incarnation: m.incarnation,
                        },
                    }
                }
                Ok(Some(Event::SendFailed(status, vendor))) => {
                    return ProbeOutcome::Failed(Failure::new(
                        Reason::Completion(status),
                        format!(
                            "work completion {} on the probe's send (vendor error {vendor:#x})",
                            crate::wc_status_name(status)
                        ),
                    ))
                }
                Ok(None) => {}
                Err(f) => return ProbeOutcome::Failed(f),
            }
            if Instant::now() >= deadline {
                return ProbeOutcome::Lost;
            }
            spins += 1;
            if spins < 2000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn serve(&mut self, responder: &mut Responder, served: &mut Served) {
        // Bounded: at most the receive ring and the sends, then return.
        for _ in 0..(RECV_SLOTS + SEND_SLOTS) {
            match self.poll_once(None, responder, served) {
                Ok((0, _)) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    fn idle(&mut self, timeout: Duration, responder: &mut Responder, served: &mut Served) {
        // Arm first, then drain: a completion that lands after the drain
        // raises an event, one that landed before is handled by the drain.
        // SAFETY: recv_cq is live.
        let armed = unsafe { ibv_req_notify_cq(self.recv_cq, 0) } == 0;
        let before = *served;
        self.serve(responder, served);
        // Answers waiting for an address handle are sent from polls: a
        // port holding some wakes at least every millisecond.
        if *served != before || !armed || !self.waiting.is_empty() {
            if !armed || !self.waiting.is_empty() {
                std::thread::sleep(timeout.min(Duration::from_millis(1)));
            }
            return;
        }
        // SAFETY: channel is live.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready > 0 {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: the channel is live and non-blocking; an event got is
            // acknowledged at once (ibv_destroy_cq waits for every ack).
            unsafe {
                if ibv_get_cq_event(self.channel, &mut cq, &mut ctx) == 0 {
                    ibv_ack_cq_events(cq, 1);
                }
            }
            self.serve(responder, served);
        }
    }
}
