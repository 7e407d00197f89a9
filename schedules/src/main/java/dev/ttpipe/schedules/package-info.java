/** ttpipe schedules. */
package dev.ttpipe.schedules;
